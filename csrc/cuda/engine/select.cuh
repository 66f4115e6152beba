// The select: stream compaction of flagged elements in one pass (the seed's predicate -> scan
// -> scatter), on the engine's block scan and a look-back of counts.
//
// A block takes a tile of kTile consecutive positions (tile ids in start order), kItems per
// thread. Each thread loads its mask bytes in one wide load and its elements in wide loads,
// counts its kept positions, and the block scans the counts (BlockScan): each kept element now
// has its slot within the tile. Warp 0 publishes the tile's count and looks back over its
// predecessors' counts (lookback.cuh, status and count in one word) for the tile's first
// output slot, while the other warps stage their kept elements in shared memory at their tile
// slots. After one barrier the block stores the staged elements to consecutive output slots:
// coalesced, whatever the mask.
//
// Counts are integers, so the result does not depend on the order of the look-back: the
// select is deterministic.
#pragma once

#include <cstdint>

#include "../../core/compact_problems.h"
#include "../../core/vector_io.h"
#include "block.cuh"
#include "lookback.cuh"
#include "policy.cuh"

namespace parprims::cuda {

// One flat compaction of a mask of n bytes (core/compact_problems.h); the last tile writes the
// count.
template <class Word>
struct SelectCall : CompactArrays<Word> {
  int64_t n = 0;
};

template <class Word>
struct SelectFlagged {
  using Policy = SelectPolicy<Word>;
  static constexpr int kThreads = Policy::kThreads;
  static constexpr int kItems = Policy::kItems;
  static constexpr int kTile = Policy::kTile;
  static_assert(kItems % 4 == 0 && kItems <= 32, "keep bits: whole 4-byte mask words, one 32-bit mask");
  static_assert(kTile <= 65536, "tile positions are staged as 16 bits");

  struct SharedStorage {
    typename BlockScan<Add<int>, kThreads>::Storage scan;
    Word values[kTile];              // the tile's kept elements, at their tile slots
    uint16_t positions[kTile];       // their positions in the tile (only when indices are wanted)
    unsigned long long tile;
    unsigned long long first_slot;   // the tile's first output slot (the look-back's prefix)
  };

  // 1 in the low bit of every byte of `w` that is not zero.
  static __device__ __forceinline__ uint32_t nonzero_bytes(uint32_t w) {
    w |= w >> 1;
    w |= w >> 2;
    w |= w >> 4;
    return w & 0x01010101u;
  }

  // Bit k: position first + k is kept (0 past n). A bool tensor holds 0 or 1, but any nonzero
  // byte counts as kept, as `mask[pos] ? 1 : 0` does on the CPU.
  static __device__ __forceinline__ uint32_t load_keep(const bool* mask, int64_t first, int64_t n) {
    const bool* run = mask + first;
    uint32_t words[kItems / 4];
    if (first + kItems <= n && load_wide<kItems / 4>(reinterpret_cast<const uint32_t*>(run), words)) {
      uint32_t keep = 0;
#pragma unroll
      for (int w = 0; w < kItems / 4; ++w) {
        // Each byte's low bit gathered into 4 bits (b0 -> bit 0, ..., b3 -> bit 3).
        keep |= ((nonzero_bytes(words[w]) * 0x01020408u) >> 24) << (4 * w);
      }
      return keep;
    }
    uint32_t keep = 0;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (first + k < n && run[k]) keep |= 1u << k;
    }
    return keep;
  }

  // The thread's elements: wide loads of the whole run when it is inside the mask and aligned
  // (issued before the scan, so they are in flight during it), else only the kept ones.
  static __device__ __forceinline__ void load_words(const Word* source, int64_t first, int64_t n, uint32_t keep,
                                                    Word (&words)[kItems]) {
    if (first + kItems <= n && load_wide<kItems>(source + first, words)) return;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if ((keep >> k) & 1u) words[k] = source[first + k];
    }
  }

  // Warp 0: publishes the tile's count, finds the tile's first output slot and publishes the
  // inclusive count. A state without look-back (a single tile) starts at slot 0.
  static __device__ __forceinline__ void find_first_slot(SharedStorage& smem, const CountTileState& state,
                                                         int64_t tile, int tile_count) {
    const int lane = threadIdx.x & 31;
    unsigned long long first_slot = 0;
    if (state.enabled()) {
      if (lane == 0) state.publish(tile, static_cast<unsigned long long>(tile_count), tile == 0 ? kPrefix : kAggregate);
      if (tile > 0) {
        first_slot = look_back_counts(state, tile);
        if (lane == 0) state.publish(tile, first_slot + static_cast<unsigned long long>(tile_count), kPrefix);
      }
    }
    if (lane == 0) smem.first_slot = first_slot;
  }

  static __device__ void run(const SelectCall<Word>& c, const CountTileState& state, int64_t tiles) {
    __shared__ SharedStorage smem;
    if (threadIdx.x == 0) smem.tile = state.claim_tile();
    __syncthreads();
    const int64_t tile = static_cast<int64_t>(smem.tile);
    const int64_t base = tile * kTile;
    const int local = static_cast<int>(threadIdx.x) * kItems;

    const uint32_t keep = load_keep(c.mask, base + local, c.n);
    Word words[kItems];
    if (c.source != nullptr) load_words(c.source, base + local, c.n, keep, words);

    int tile_count;
    const int slot = BlockScan<Add<int>, kThreads>::exclusive(smem.scan, __popc(keep), tile_count);
    if (threadIdx.x < 32) find_first_slot(smem, state, tile, tile_count);

    // Stage the kept elements (and their tile positions) at their tile slots.
    int at = slot;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if ((keep >> k) & 1u) {
        if (c.values != nullptr) smem.values[at] = words[k];
        if (c.indices != nullptr) smem.positions[at] = static_cast<uint16_t>(local + k);
        ++at;
      }
    }
    __syncthreads();

    const int64_t first_slot = static_cast<int64_t>(smem.first_slot);
    const int64_t room = c.capacity - first_slot;  // slots left for this tile
    const int stored = room <= 0 ? 0 : (room < tile_count ? static_cast<int>(room) : tile_count);
    for (int i = threadIdx.x; i < stored; i += kThreads) {
      if (c.values != nullptr) c.values[first_slot + i] = smem.values[i];
      if (c.indices != nullptr) c.indices[first_slot + i] = base + smem.positions[i];
    }
    if (tile == tiles - 1 && threadIdx.x == 0) *c.count = first_slot + tile_count;
  }
};

template <class Word>
__global__ void __launch_bounds__(SelectFlagged<Word>::kThreads, SelectPolicy<Word>::kMinBlocksPerSM)
    select_flagged_kernel(const SelectCall<Word> c, const CountTileState state, int64_t tiles) {
  SelectFlagged<Word>::run(c, state, tiles);
}

}  // namespace parprims::cuda
