// The select: stream compaction of flagged elements (the seed's predicate -> scan -> scatter),
// in three passes on the engine's scan pieces, none of which waits for another block:
//
//  1. count (reads the mask): a warp turns 4096 mask bytes into 4096 keep bits (16-byte loads)
//     and counts them per group of 1024 positions; a block of 8 warps scans its 32 group counts:
//     each group's offset within the block, and the block's total.
//  2. block slots: one block scans the count blocks' totals (8192 a round; 2^28 positions are
//     one round): each count block's first output slot, and the count.
//  3. scatter (reads the keep bits and the elements): a block takes a tile, kItems positions
//     per thread; each thread reads its keep bits and its elements in wide loads, the block
//     scans the threads' counts (BlockScan): each kept element has its slot within the tile.
//     The kept elements are staged in shared memory at their tile slots; after one barrier
//     the block stores them to consecutive output slots from the tile's first (its count
//     block's slot plus its group's offset): coalesced, whatever the mask.
//
// Two designs that made blocks wait were slower (benchmarks/NOTES.md, H200, 2^28 float32, half
// kept): one pass with CUB's decoupled look-back in the scattering blocks (a block waited for
// its predecessors' counts with its tile held: 0.795 ms), and a count pass that joined its
// blocks' counts by a look-back (each of 8192 blocks walked back over the wave resident with
// it: the count took 117 us, against 61 us without). The keep bits cost the count pass n/8
// bytes of writes and save the scatter n - n/8 bytes of mask reads.
// Counts are integers, so the result does not depend on any order: the select is
// deterministic.
#pragma once

#include <cstdint>

#include "../../core/compact_problems.h"
#include "../../core/vector_io.h"
#include "block.cuh"
#include "policy.cuh"

namespace parprims::cuda {

// One flat compaction of a mask of n bytes (core/compact_problems.h).
template <class Word>
struct SelectCall : CompactArrays<Word> {
  int64_t n = 0;
};

// The count pass's tiles: a warp takes kCountTile positions, a block kCountWarps of them; the
// offsets are kept per group of kSlotGroup positions, the smallest scatter tile (1024 x
// 16-byte elements), so that one plan serves the scatter of every element size.
constexpr int kCountTile = 4096;
constexpr int kCountWarps = 8;
constexpr int kSlotGroup = 1024;
constexpr int kGroupsPerCountTile = kCountTile / kSlotGroup;
constexpr int kGroupsPerCountBlock = kCountWarps * kGroupsPerCountTile;
static_assert(kGroupsPerCountBlock == 32, "a count block's groups are one per lane of a warp");
// The block-slots pass: one block of kSlotsThreads threads, kSlotsItems count blocks each a round.
constexpr int kSlotsThreads = 1024;
constexpr int kSlotsItems = 8;

// What the count passes leave for the scatter (a plan of one mask, reusable by any number of
// scatters of that mask):
//   keep_bits[e]      bit k: position 16 e + k is kept (0 past n)
//   group_offsets[g]  kept positions of group g's count block before the group
//   block_slots[b]    count block b's total (pass 1), then its first output slot (pass 2);
//                     block_slots[count_blocks] is the count
struct SelectPlan {
  int64_t* block_slots = nullptr;
  int32_t* group_offsets = nullptr;
  uint16_t* keep_bits = nullptr;

  __host__ __device__ static int64_t bits_entries(int64_t n) { return (n + 15) / 16; }
  __host__ __device__ static int64_t groups(int64_t n) { return (n + kSlotGroup - 1) / kSlotGroup; }
  __host__ __device__ static int64_t count_blocks(int64_t n) {
    return (n + int64_t{kCountTile} * kCountWarps - 1) / (int64_t{kCountTile} * kCountWarps);
  }
  // Byte sizes of the three arrays, each a multiple of 16 bytes, in this order.
  static int64_t slots_bytes(int64_t n) { return ((count_blocks(n) + 1) * 8 + 15) / 16 * 16; }
  static int64_t offsets_bytes(int64_t n) { return (groups(n) * 4 + 15) / 16 * 16; }
  static int64_t bits_bytes(int64_t n) { return (bits_entries(n) * 2 + 15) / 16 * 16; }
  static int64_t bytes(int64_t n) { return slots_bytes(n) + offsets_bytes(n) + bits_bytes(n); }
  static SelectPlan at(unsigned char* base, int64_t n) {
    SelectPlan p;
    p.block_slots = reinterpret_cast<int64_t*>(base);
    p.group_offsets = reinterpret_cast<int32_t*>(base + slots_bytes(n));
    p.keep_bits = reinterpret_cast<uint16_t*>(base + slots_bytes(n) + offsets_bytes(n));
    return p;
  }

  // After pass 2: the kept positions before position g * kSlotGroup, and in all.
  __device__ __forceinline__ int64_t first_slot(int64_t group) const {
    return block_slots[group / kGroupsPerCountBlock] + group_offsets[group];
  }
  __device__ __forceinline__ int64_t count(int64_t n) const { return block_slots[count_blocks(n)]; }
};

// 1 in the low bit of every byte of `w` that is not zero.
__device__ __forceinline__ uint32_t nonzero_bytes(uint32_t w) {
  w |= w >> 1;
  w |= w >> 2;
  w |= w >> 4;
  return w & 0x01010101u;
}

// The keep bits of 4 mask bytes: bit k set where byte k is not zero (any nonzero byte counts
// as kept, as `mask[pos] ? 1 : 0` does on the CPU).
__device__ __forceinline__ uint32_t keep_bits_of(uint32_t w) {
  return (nonzero_bytes(w) * 0x01020408u) >> 24;  // each byte's low bit gathered into 4 bits
}

// The keep bits of the 16 positions from `first` (a multiple of 16): one 16-byte load when
// they are inside the mask and aligned, else byte loads (0 past n).
__device__ __forceinline__ uint32_t load_keep_16(const bool* mask, int64_t first, int64_t n) {
  const bool* run = mask + first;
  if (first + 16 <= n && reinterpret_cast<uintptr_t>(run) % 16 == 0) {
    const uint4 w = *reinterpret_cast<const uint4*>(run);
    return keep_bits_of(w.x) | keep_bits_of(w.y) << 4 | keep_bits_of(w.z) << 8 | keep_bits_of(w.w) << 12;
  }
  uint32_t keep = 0;
  for (int k = 0; k < 16 && first + k < n; ++k) keep |= (run[k] ? 1u : 0u) << k;
  return keep;
}

// The count pass (1). Count block b takes kCountWarps tiles of kCountTile positions from
// b * kCountWarps * kCountTile; lane L of a warp reads the 16 positions at 16 (32 i + L) of its
// tile for i = 0..7 (a warp's load is 512 consecutive bytes), writes their keep bits, and the
// warp sums the counts of the tile's kSlotGroup-position groups. Warp 0 scans the block's 32
// group counts: the groups' offsets within the block, and the block's total.
__global__ void __launch_bounds__(32 * kCountWarps) select_count_kernel(const bool* mask, int64_t n, SelectPlan plan) {
  constexpr int kLoads = kCountTile / 512;
  constexpr int kLoadsPerGroup = kLoads / kGroupsPerCountTile;
  __shared__ int group_counts[kGroupsPerCountBlock];
  const int64_t block = blockIdx.x;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t base = (block * kCountWarps + warp) * kCountTile;
  const int64_t entries = SelectPlan::bits_entries(n);

  uint32_t bits[kLoads];
#pragma unroll
  for (int i = 0; i < kLoads; ++i) bits[i] = load_keep_16(mask, base + 16 * (32 * i + lane), n);
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    const int64_t entry = base / 16 + 32 * i + lane;
    if (entry < entries) plan.keep_bits[entry] = static_cast<uint16_t>(bits[i]);
  }
#pragma unroll
  for (int g = 0; g < kGroupsPerCountTile; ++g) {
    int c = 0;
#pragma unroll
    for (int i = g * kLoadsPerGroup; i < (g + 1) * kLoadsPerGroup; ++i) c += __popc(bits[i]);
    c = __reduce_add_sync(kFullMask, c);
    if (lane == 0) group_counts[warp * kGroupsPerCountTile + g] = c;
  }
  __syncthreads();
  if (warp != 0) return;

  const int group_count = group_counts[lane];
  const int inclusive = warp_inclusive_scan<Add<int>>(group_count);
  const int64_t group = block * kGroupsPerCountBlock + lane;
  if (group < SelectPlan::groups(n)) plan.group_offsets[group] = inclusive - group_count;
  if (lane == 31) plan.block_slots[block] = inclusive;
}

// The block-slots pass (2), one block: block_slots[b] becomes the exclusive prefix of the
// count blocks' totals, block_slots[blocks] and *count the sum. Each thread takes kSlotsItems
// consecutive totals a round; the rounds carry their sums.
__global__ void __launch_bounds__(kSlotsThreads) select_block_slots_kernel(int64_t blocks, SelectPlan plan,
                                                                          int64_t* count) {
  using Scan = BlockScan<Add<int64_t>, kSlotsThreads>;
  __shared__ typename Scan::Storage storage;
  int64_t carry = 0;
  for (int64_t round = 0; round < blocks; round += int64_t{kSlotsThreads} * kSlotsItems) {
    const int64_t first = round + static_cast<int64_t>(threadIdx.x) * kSlotsItems;
    int64_t totals[kSlotsItems];
    int64_t sum = 0;
#pragma unroll
    for (int k = 0; k < kSlotsItems; ++k) {
      totals[k] = first + k < blocks ? plan.block_slots[first + k] : 0;
      sum += totals[k];
    }
    int64_t round_total;
    int64_t slot = carry + Scan::exclusive(storage, sum, round_total);
#pragma unroll
    for (int k = 0; k < kSlotsItems; ++k) {
      if (first + k < blocks) plan.block_slots[first + k] = slot;
      slot += totals[k];
    }
    carry += round_total;
    __syncthreads();  // the next round's scan writes the storage this one read
  }
  if (threadIdx.x == 0) {
    plan.block_slots[blocks] = carry;
    *count = carry;
  }
}

// The scatter pass (3): block b takes tile b (kThreads x kItems positions), with the plan's keep
// bits and first output slot.
template <class Word>
struct SelectScatter {
  using Policy = SelectPolicy<Word>;
  static constexpr int kThreads = Policy::kThreads;
  static constexpr int kItems = Policy::kItems;
  static constexpr int kTile = Policy::kTile;
  static_assert(16 % kItems == 0 && kItems <= 16, "a thread's keep bits lie in one 16-bit entry");
  static_assert(kTile % kSlotGroup == 0, "a tile starts a slot group");
  static_assert(kTile <= 65536, "tile positions are staged as 16 bits");

  struct SharedStorage {
    typename BlockScan<Add<int>, kThreads>::Storage scan;
    Word values[kTile];         // the tile's kept elements, at their tile slots
    uint16_t positions[kTile];  // their positions in the tile (only when indices are wanted)
  };

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

  // Stages the thread's kept elements (and their tile positions) at their tile slots.
  static __device__ __forceinline__ void stage(SharedStorage& smem, const SelectCall<Word>& c, int local,
                                               uint32_t keep, const Word (&words)[kItems], int slot) {
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if ((keep >> k) & 1u) {
        if (c.values != nullptr) smem.values[slot] = words[k];
        if (c.indices != nullptr) smem.positions[slot] = static_cast<uint16_t>(local + k);
        ++slot;
      }
    }
  }

  // After the barrier: the block stores the staged elements to consecutive output slots from
  // the tile's first, as many as the capacity leaves room for.
  static __device__ __forceinline__ void store(const SharedStorage& smem, const SelectCall<Word>& c, int64_t base,
                                               int64_t first_slot, int tile_count) {
    const int64_t room = c.capacity - first_slot;  // slots left for this tile
    const int stored = room <= 0 ? 0 : (room < tile_count ? static_cast<int>(room) : tile_count);
    for (int i = threadIdx.x; i < stored; i += kThreads) {
      if (c.values != nullptr) c.values[first_slot + i] = smem.values[i];
      if (c.indices != nullptr) c.indices[first_slot + i] = base + smem.positions[i];
    }
  }

  static __device__ void run(const SelectCall<Word>& c, const SelectPlan& plan) {
    __shared__ SharedStorage smem;
    const int64_t tile = blockIdx.x;
    const int64_t base = tile * kTile;
    const int64_t first_slot = plan.first_slot(tile * (kTile / kSlotGroup));
    if (first_slot >= c.capacity) return;  // the whole block: nothing of this tile is stored

    const int local = static_cast<int>(threadIdx.x) * kItems;
    const int64_t first = base + local;
    const uint32_t keep =
        first < c.n ? (plan.keep_bits[first / 16] >> (first % 16)) & ((1u << kItems) - 1) : 0u;
    Word words[kItems];
    if (c.source != nullptr) load_words(c.source, first, c.n, keep, words);
    int tile_count;
    const int slot = BlockScan<Add<int>, kThreads>::exclusive(smem.scan, __popc(keep), tile_count);
    stage(smem, c, local, keep, words, slot);
    __syncthreads();
    store(smem, c, base, first_slot, tile_count);
  }
};

template <class Word>
__global__ void __launch_bounds__(SelectScatter<Word>::kThreads, SelectPolicy<Word>::kMinBlocksPerSM)
    select_scatter_kernel(const SelectCall<Word> c, const SelectPlan plan) {
  SelectScatter<Word>::run(c, plan);
}

}  // namespace parprims::cuda
