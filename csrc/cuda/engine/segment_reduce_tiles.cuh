// The tile pass of the segment reductions (segment_reduce.cuh): a block (or, for short rows, a
// warp) folds one tile of consecutive positions of a row, for rows whose sequences are short on
// average (longer ones go to the stream pass, segment_reduce_stream.cuh, unless the combine is
// costly).
#pragma once

#include "dependent_launch.cuh"
#include "segment_reduce_pieces.cuh"
#include "warp.cuh"

namespace parprims::cuda {

// The tiles of the rows pass: kThreads x kItems consecutive positions of one row (kItems * 32 for
// rows shorter than half of that: a warp's tile). 16 values a thread (4096 float32 a tile, four
// 16-byte loads a thread), not 8: the work of a tile that does not grow with it (its segments
// from first_segment and the offsets, the slow path's barriers and block scan, two partials and
// their fix-up) is shared by twice the bytes, and the 16 registers of values still fit the 64 of
// 4 blocks per SM, which keep up to 64 KB per SM in flight (the copy bandwidth needs about 32-40
// KB). 8 values a thread would need twice the blocks per SM, 32 registers each, for the same.
// Wider values take fewer a thread: 64 bytes of values a thread, 16 KB a block tile.
template <class Value>
struct SegmentReducePolicy {
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kMinBlocksPerSM = 4;  // 64 registers
  static constexpr int kItems = sizeof(Value) <= 4 ? 16 : sizeof(Value) <= 8 ? 8 : 4;
};

// What the rows pass scans across a tile's threads: the fold of a range of positions since the
// latest segment start in it (all of them when none starts there) and that start's segment,
// relative to the tile's first segment (-1: no start). A segmented monoid whose flag names the
// segment.
template <class M>
struct RunCarry {
  struct value_type {
    typename M::value_type value;
    int segment;
  };
  static PP_HD value_type identity() { return {M::identity(), -1}; }
  static PP_HD value_type combine(const value_type& earlier, const value_type& later) {
    if (later.segment >= 0) return later;
    return {M::combine(earlier.value, later.value), earlier.segment};
  }
};

// The rows pass: one tile (kTileThreads threads, kItems consecutive positions each) per piece,
// a block per tile (kTileThreads = kThreads) or a warp per tile for short rows (kTileThreads =
// 32, eight tiles a block). Non-persistent: a thread issues its loads before anything else, and
// the other blocks of the SM keep theirs in flight while a block folds. The tile's segments are
// [lo, hi] (first_segment).
//  * No segment starts inside the tile (every tile of an unsegmented row; most tiles when the
//    segments are much longer than a tile): each thread folds its values, the tile combines the
//    threads in order, and one thread writes the fold (final, head or tail).
//  * Otherwise: the tile marks in shared memory the positions where a non-empty segment starts
//    and which segment it is (a loop over the offsets lo..hi, spread over the threads); each
//    thread folds its values as runs split at those starts, keeping the fold of each run that
//    ends a segment (before a start, or at the tile's last position) in shared memory; a
//    segmented scan of the threads' (fold since the last start, its segment) pairs gives each
//    thread the carry into its first run; and each thread writes the runs that end in its
//    positions, in a loop over them (not unrolled: the notes record an unrolled per-position walk
//    overflowing the instruction cache).
template <class P, int kTileThreads>
__global__ void __launch_bounds__(SegmentReducePolicy<typename P::Value>::kThreads,
                                  SegmentReducePolicy<typename P::Value>::kMinBlocksPerSM)
    segment_reduce_rows_kernel(const P problem, const ScanGeometry g, const PiecePartials<typename P::Value> parts,
                               const PieceSegments segments, int64_t chunks, int64_t pieces, bool wide) {
  if (chunks > 1) allow_dependent_launch();  // the fix-up follows (see allow_dependent_launch)
  using M = typename P::Monoid;
  using Value = typename P::Value;
  using Carry = RunCarry<M>;
  using Lifted = typename Carry::value_type;
  using Policy = SegmentReducePolicy<Value>;
  constexpr int kThreads = Policy::kThreads;
  constexpr int kItems = Policy::kItems;
  constexpr int kTiles = kThreads / kTileThreads;  // tiles a block
  constexpr int kTileWarps = kTileThreads / 32;
  constexpr int kTile = kTileThreads * kItems;
  constexpr int kWords = kTile / 32 + 1;  // start bits of the tile's positions and of the one after it (0)
  static_assert(kTileThreads == 32 || kTileThreads == kThreads, "a tile is a warp's or the block's");
  static_assert(32 % kItems == 0, "a thread's start bits lie in one word");
  // The slow path's marks: which positions start a non-empty segment, and which segment (then,
  // at the positions where a run ends a segment, the run's segment), and the folds of those
  // runs. A thread's k-th position has slot k * kThreads + threadIdx.x: no bank conflicts when
  // the threads of a warp take the same k.
  __shared__ uint32_t start_bits[kTiles][kWords];
  __shared__ int segment_at[kItems * kThreads];
  __shared__ Value run_values[kItems * kThreads];
  __shared__ Lifted warp_totals[Policy::kWarps];
  const int tile = threadIdx.x / kTileThreads;  // the block's tile of this thread
  const int t = threadIdx.x % kTileThreads;     // the thread's place in its tile
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;  // with block tiles, the warp's place in its tile
  const int64_t piece = static_cast<int64_t>(blockIdx.x) * kTiles + tile;
  if (piece >= pieces) return;  // a whole tile (only with warp tiles, which use no block barrier)
  auto sync_tile = [] {
    if constexpr (kTiles == 1) __syncthreads(); else __syncwarp();
  };
  auto slot = [](int k) { return k * kThreads + static_cast<int>(threadIdx.x); };

  const int64_t row = piece / chunks;
  const int64_t chunk = piece - row * chunks;
  const int64_t tile_begin = chunk * kTile;
  const int tile_len = static_cast<int>(min(int64_t(kTile), g.len - tile_begin));  // less in a row's last tile
  const int64_t tile_end = tile_begin + tile_len;
  const int first = t * kItems;  // the thread's positions: tile_begin + [first, first + count)
  const int count = max(0, min(kItems, tile_len - first));
  // The loads first: the bytes are in flight while the tile's segments are looked up.
  const auto cursor = problem.cursor(row);
  Value v[kItems];
  // The whole-run test compares the positions left directly: written as `count == kItems`, ptxas
  // (CUDA 13.0, sm_90) folds it into the predicate output of the clamping VIMNMX.RELU, which
  // then holds for a partial run (count 7 of 8 took the 16-byte loads and read into the next row).
  const bool whole_run = tile_len - first >= kItems;
  if (!(whole_run && wide && problem.template load_run<kItems>(cursor, tile_begin + first, v))) {
#pragma unroll
    for (int k = 0; k < kItems; ++k) v[k] = k < count ? problem.load(cursor, tile_begin + first + k) : M::identity();
  }
  const int64_t lo = segments.lo(chunk);  // holds the tile's first position
  const int64_t hi = segments.hi(chunk);
  const int64_t lo_start = g.segment_start(lo);
  const int64_t lo_end = g.segment_start(lo + 1);
  // The offsets of the slow path's first marks, loaded with lo's: one round trip less before the
  // fold. (hi <= last: k + 1 is an offset that exists.)
  const bool marks = lo + t <= hi;
  const int64_t mark_start = marks ? g.segment_start(lo + t) : 0;
  const int64_t mark_end = marks ? g.segment_start(lo + t + 1) : 0;
  // What ends in this tile: a segment that started in it (whole: final; going on: the tail), or
  // the tile's part of the segment that started before it (the head).
  auto write = [&](int64_t segment, const Value& value, bool started_here, bool ends_segment) {
    if (started_here && ends_segment) {
      problem.store_final(row, segment, value);
    } else {
      (started_here ? parts.tail : parts.head)[parts.at(row, chunk)] = value;
    }
  };

  if (lo_end >= tile_end) {
    // ---- one segment over the whole tile ----
    Value folded = v[0];
#pragma unroll
    for (int k = 1; k < kItems; ++k) folded = M::combine(folded, v[k]);
    folded = warp_reduce<M>(folded);
    if constexpr (kTileWarps > 1) {
      if (lane == 0) warp_totals[warp].value = folded;
      __syncthreads();
      if (t != 0) return;
      for (int w = 1; w < kTileWarps; ++w) folded = M::combine(folded, warp_totals[w].value);
    } else if (t != 0) {
      return;
    }
    write(lo, folded, lo_start == tile_begin, lo_end == tile_end);
    return;
  }

  // ---- segments start inside the tile ----
  uint32_t* bits = start_bits[tile];
  for (int i = t; i < kWords; i += kTileThreads) bits[i] = 0;
  sync_tile();
  // A non-empty segment that starts in the tile marks its first position; an empty one starts
  // where the next one does and marks nothing.
  auto mark = [&](int64_t k, int64_t begin, int64_t end) {
    const int64_t p = begin - tile_begin;
    if (p >= 0 && p < tile_len && end - tile_begin > p) {
      const int q = static_cast<int>(p);
      atomicOr(&bits[q / 32], 1u << (q % 32));
      segment_at[(q % kItems) * kThreads + tile * kTileThreads + q / kItems] = static_cast<int>(k - lo);
    }
  };
  if (marks) mark(lo + t, mark_start, mark_end);
#pragma unroll 4
  for (int64_t k = lo + t + kTileThreads; k <= hi; k += kTileThreads) {  // tiles of many short segments
    mark(k, g.segment_start(k), g.segment_start(k + 1));
  }
  sync_tile();
  // The thread's starts (bit k: position first + k), and the ends of its runs: before a start
  // (also the next thread's first), and at the tile's last position.
  const uint32_t starts = (bits[first / 32] >> (first % 32)) & ((1u << kItems) - 1);
  const int after = first + kItems;
  uint32_t ends = (starts >> 1) | (((bits[after / 32] >> (after % 32)) & 1u) << (kItems - 1));
  if (tile_len - 1 >= first && tile_len - 1 < after) ends |= 1u << (tile_len - 1 - first);
  // The fold of the thread's values, restarting at each start; each run that ends here keeps its
  // fold and its segment (-1: the segment that comes in from the earlier threads) in its slot.
  Value acc = v[0];
  int segment = -1;
  if (__any_sync(kFullMask, starts != 0)) {
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const bool head = (starts >> k) & 1u;
      if (k > 0) acc = head ? v[k] : M::combine(acc, v[k]);
      if (head) segment = segment_at[slot(k)];
      if ((ends >> k) & 1u) {
        run_values[slot(k)] = acc;
        segment_at[slot(k)] = segment;
      }
    }
  } else {
    // No start in the warp's runs (most warps: a tile holds a few starts): one fold per thread,
    // and at most one end (before the next warp's first start, or the tile's last position;
    // the values past the tile are the identity).
#pragma unroll
    for (int k = 1; k < kItems; ++k) acc = M::combine(acc, v[k]);
    if (ends != 0) {
      const int k = __ffs(ends) - 1;
      run_values[slot(k)] = acc;
      segment_at[slot(k)] = -1;
    }
  }
  // The carry into the thread's first run: the exclusive segmented scan of the threads' folds
  // since their last start, in the tile's order (a warp scan, then the earlier warps' totals).
  const Lifted inclusive = warp_inclusive_scan<Carry>(Lifted{acc, segment});
  Lifted carry = shfl_up(inclusive, 1);
  if constexpr (kTileWarps > 1) {
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    // The earlier warps' totals: straight-line where a combine is cheap (their loads issued
    // together, not one per trip; the sum 0.129 -> 0.119 ms with the start-free fold above), a loop
    // over the earlier warps alone where it is costly (logsumexp: 0.268 -> 0.305 ms unrolled).
    Lifted before = Carry::identity();
    if constexpr (kCostlyCombine<M>) {
      for (int w = 0; w < warp; ++w) before = Carry::combine(before, warp_totals[w]);
    } else {
#pragma unroll
      for (int w = 0; w < kTileWarps - 1; ++w) {
        if (w < warp) before = Carry::combine(before, warp_totals[w]);
      }
    }
    carry = lane == 0 ? before : Carry::combine(before, carry);
  } else if (lane == 0) {
    carry = Carry::identity();
  }
  // The runs that end in this thread's positions, each written by this thread: a loop over them.
  while (ends != 0) {
    const int k = __ffs(ends) - 1;
    ends &= ends - 1;
    Value value = run_values[slot(k)];
    int s = segment_at[slot(k)];
    if (s < 0) {  // the thread's first run: the segment of the carry (lo when no start came before)
      value = M::combine(carry.value, value);
      s = carry.segment;
    }
    const int64_t seg = lo + max(s, 0);
    const bool tile_last = first + k == tile_len - 1;
    write(seg, value, s >= 0, !tile_last || g.segment_start(seg + 1) == tile_end);
  }
}

}  // namespace parprims::cuda
