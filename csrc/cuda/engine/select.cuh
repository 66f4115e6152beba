// The select: stream compaction of flagged elements (the seed's predicate -> scan -> scatter),
// in three passes on the engine's scan pieces, none of which waits for another block:
//
//  1. count (reads the mask): a warp turns 4096 mask bytes into 4096 keep bits (16-byte loads)
//     and counts them per group of 1024 positions; a block of 8 warps scans its 32 group counts:
//     each group's offset within the block, and the block's total.
//  2. block slots: one block scans the count blocks' totals (8192 a round; 2^28 positions are
//     one round): each count block's first output slot, and the count.
//  3. scatter (reads the keep bits and the elements): a warp takes 32 x kItems positions, each
//     lane reads its keep bits and its elements in wide loads, the lanes scan their counts
//     (shuffles), stage their kept elements in shared memory at their warp slots, and the warp
//     stores them to consecutive output slots from its first (its slot group's first slot plus
//     the group's kept positions before the warp): coalesced, whatever the mask, and no warp
//     waits for another. The same pass fills the slots past the count, where asked.
//
// Designs that made blocks wait were slower (benchmarks/NOTES.md, H200, 2^28 float32, half
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
#include "dependent_launch.cuh"
#include "policy.cuh"

namespace parprims::cuda {

// One flat compaction of a mask of n bytes (core/compact_problems.h).
// `fill_past_count`: the scatter also fills the slots past the count (values with `fill`,
// indices with -1).
template <class Word>
struct SelectCall : CompactArrays<Word> {
  int64_t n = 0;
  bool fill_past_count = false;
  Word fill{};
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
  allow_dependent_launch();  // the block-slots pass may start; it waits for this one's end
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
  allow_dependent_launch();  // the scatter may start its element loads
  wait_for_prerequisite_grid();  // the count blocks' totals
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

// The scatter pass (3): each warp takes a warp tile of kWarpTile positions (kItems a lane) and
// works alone, with no block barrier: a warp's kept elements go to consecutive output slots
// from its first, which is its slot group's first slot (the plan) plus the group's kept
// positions before the warp (popcounts of the keep bits there). The lanes scan their counts
// (warp shuffles), stage their kept elements in the warp's part of shared memory at their
// slots, and after a warp barrier the warp stores them in order: coalesced, whatever the mask.
// A warp that waits for its loads holds back no other warp (a block barrier made every warp of
// a block wait for the slowest's loads). Then each warp writes its share of the slots past the
// count (the capacity form's fill), so that no fourth kernel is needed.
template <class Word>
struct SelectScatter {
  using Policy = SelectPolicy<Word>;
  static constexpr int kThreads = Policy::kThreads;
  static constexpr int kItems = Policy::kItems;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kWarpTile = 32 * kItems;
  static constexpr int kTile = kWarps * kWarpTile;  // a block's positions
  static_assert(16 % kItems == 0 && kItems <= 16, "a lane's keep bits lie in one 16-bit entry");
  static_assert(kSlotGroup % kWarpTile == 0, "a warp tile lies in one slot group");
  static_assert(kWarpTile <= 65536, "warp tile positions are staged as 16 bits");

  // Elements a 16-byte store takes, for elements of up to 4 bytes (8-byte elements gain little
  // and spill under the 40-register cap).
  static constexpr int kVector = sizeof(Word) <= 4 ? 16 / static_cast<int>(sizeof(Word)) : 1;
  // A warp's staging rows: its kept elements from entry `shift` (the first output slot's place
  // in a 16-byte word, so that entries and slots agree modulo kVector), then the lanes' spares
  // for dropped items.
  static constexpr int kStaged = kVector > 1 ? kWarpTile + kVector : kWarpTile;
  static constexpr int kSpare = kStaged;
  struct SharedStorage {
    // The kept elements, and their positions in the warp tile (only when indices are wanted).
    alignas(16) Word values[kWarps][kStaged + 32];
    uint16_t positions[kWarps][kStaged + 32];
  };
  static_assert((kStaged + 32) * sizeof(Word) % 16 == 0, "each warp's staged values start 16-byte aligned");

  // The lane's kept elements, one by one (where the wide loads could not take the whole run).
  static __device__ __forceinline__ void load_kept(const Word* source, int64_t first, uint32_t keep,
                                                   Word (&words)[kItems]) {
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if ((keep >> k) & 1u) words[k] = source[first + k];
    }
  }

  // The kept positions of the warp tile's slot group before the warp tile.
  static __device__ __forceinline__ int kept_before_in_group(const SelectPlan& plan, int64_t warp_base) {
    constexpr int kRounds = (kSlotGroup / 16 + 31) / 32;  // the group's entries, 32 a round
    const int64_t group_entry = warp_base / kSlotGroup * (kSlotGroup / 16);
    const int before = static_cast<int>(warp_base / 16 - group_entry);  // entries before the warp tile
    int kept = 0;
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      const int e = 32 * r + static_cast<int>(threadIdx.x & 31);
      if (e < before) kept += __popc(plan.keep_bits[group_entry + e]);
    }
    return __reduce_add_sync(kFullMask, kept);
  }

  // Stages the lane's kept elements (and their warp-tile positions) at their warp slots.
  static __device__ __forceinline__ void stage(SharedStorage& smem, const SelectCall<Word>& c, int warp, int local,
                                               uint32_t keep, const Word (&words)[kItems], int slot) {
    // Branch-free: every item is stored, a dropped one to the lane's spare slot past the warp's
    // kWarpTile (a store under `if (kept)` made the compiler recompute the shared address
    // inside each condition; one spare per lane, so that no two threads write one address).
    const int spare = kSpare + static_cast<int>(threadIdx.x & 31);
    if (c.values != nullptr) {
      Word* staged = smem.values[warp];
      int s = slot;
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int kept = (keep >> k) & 1u;
        staged[kept ? s : spare] = words[k];
        s += kept;
      }
    }
    if (c.indices != nullptr) {
      uint16_t* staged = smem.positions[warp];
      int s = slot;
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int kept = (keep >> k) & 1u;
        staged[kept ? s : spare] = static_cast<uint16_t>(local + k);
        s += kept;
      }
    }
  }

  // After the warp barrier: the warp stores its staged elements (entries [shift, shift + stored))
  // to consecutive output slots from its first, as many as the capacity leaves room for. Values
  // go in 16-byte words where the output is 16-byte aligned (a quarter of the store requests of
  // 4-byte elements), element by element in the partial words at both ends.
  static __device__ __forceinline__ void store(const SharedStorage& smem, const SelectCall<Word>& c, int warp,
                                               int64_t warp_base, int64_t first_slot, int shift, int warp_count) {
    const int64_t room = c.capacity - first_slot;  // slots left for this warp tile
    const int stored = room <= 0 ? 0 : (room < warp_count ? static_cast<int>(room) : warp_count);
    const int lane = static_cast<int>(threadIdx.x & 31);
    const Word* staged = smem.values[warp];
    if (c.values != nullptr) {
      Word* out = c.values + (first_slot - shift);  // entry e goes to out[e]
      if (kVector > 1 && reinterpret_cast<uintptr_t>(c.values) % 16 == 0) {
        const int end = shift + stored;
        for (int w = lane; w * kVector < end; w += 32) {
          const int lo = w * kVector;
          if (lo >= shift && lo + kVector <= end) {
            *reinterpret_cast<int4*>(out + lo) = *reinterpret_cast<const int4*>(staged + lo);
          } else {
            for (int e = lo < shift ? shift : lo; e < lo + kVector && e < end; ++e) out[e] = staged[e];
          }
        }
      } else {
        for (int e = shift + lane; e < shift + stored; e += 32) out[e] = staged[e];
      }
    }
    if (c.indices != nullptr) {
      for (int i = lane; i < stored; i += 32) c.indices[first_slot + i] = warp_base + smem.positions[warp][shift + i];
    }
  }

  static __device__ __forceinline__ void scatter_warp_tile(SharedStorage& smem, const SelectCall<Word>& c,
                                                           const SelectPlan& plan, int64_t global_warp) {
    const int warp = static_cast<int>(threadIdx.x >> 5);
    const int64_t warp_base = global_warp * kWarpTile;
    if (warp_base >= c.n) return;
    const int local = static_cast<int>(threadIdx.x & 31) * kItems;
    const int64_t first = warp_base + local;
    // The elements first, where they are read whole (no keep bits needed): in flight while the
    // plan's passes finish.
    Word words[kItems];
    const bool loaded = c.source != nullptr && first + kItems <= c.n && load_wide<kItems>(c.source + first, words);
    wait_for_prerequisite_grid();
    const int64_t group_slot = plan.first_slot(warp_base / kSlotGroup);
    if (group_slot >= c.capacity) return;  // nothing of this warp tile is stored
    const uint32_t keep =
        first < c.n ? (plan.keep_bits[first / 16] >> (first % 16)) & ((1u << kItems) - 1) : 0u;
    if (c.source != nullptr && !loaded) load_kept(c.source, first, keep, words);
    const int64_t first_slot = group_slot + kept_before_in_group(plan, warp_base);
    const int count = __popc(keep);
    const int inclusive = warp_inclusive_scan<Add<int>>(count);
    const int shift = static_cast<int>(first_slot % kVector);
    stage(smem, c, warp, local, keep, words, shift + inclusive - count);
    __syncwarp();
    store(smem, c, warp, warp_base, first_slot, shift, __shfl_sync(kFullMask, inclusive, 31));
  }

  // The capacity form's fill: slots [count, capacity) take fill_value (values) and -1
  // (indices), cut into one contiguous share per warp of the grid.
  static __device__ __forceinline__ void fill_share(const SelectCall<Word>& c, const SelectPlan& plan,
                                                    int64_t global_warp) {
    wait_for_prerequisite_grid();
    const int64_t count = plan.count(c.n);
    if (count >= c.capacity) return;
    const int64_t warps = static_cast<int64_t>(gridDim.x) * kWarps;
    const int64_t share = (c.capacity - count + warps - 1) / warps;
    const int64_t begin = count + global_warp * share;
    const int64_t end = begin + share < c.capacity ? begin + share : c.capacity;
    for (int64_t i = begin + (threadIdx.x & 31); i < end; i += 32) {
      if (c.values != nullptr) c.values[i] = c.fill;
      if (c.indices != nullptr) c.indices[i] = -1;
    }
  }

  static __device__ void run(const SelectCall<Word>& c, const SelectPlan& plan) {
    __shared__ SharedStorage smem;
    const int64_t global_warp = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    scatter_warp_tile(smem, c, plan, global_warp);
    if (c.fill_past_count) fill_share(c, plan, global_warp);
  }
};

template <class Word>
__global__ void __launch_bounds__(SelectScatter<Word>::kThreads, SelectPolicy<Word>::kMinBlocksPerSM)
    select_scatter_kernel(const SelectCall<Word> c, const SelectPlan plan) {
  SelectScatter<Word>::run(c, plan);
}

}  // namespace parprims::cuda
