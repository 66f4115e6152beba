// Reductions by segment on CUDA: one pass that folds the input and writes each segment's value
// where it ends, and a fix-up for the segments that cross the pieces the pass was cut into.
//
// The scan engines can reduce (a reduction is a segmented scan that stores only each segment's
// last inclusive value), but they pay for what a reduction does not need: a per-tile look-back
// chain and a per-element segment lift. Here the input of each row is cut into pieces of fixed
// length; a piece writes every segment that starts and ends inside it, and keeps two partial
// values for the rest: `head`, its part of the segment that started before it (the whole piece
// when that segment covers it), and `tail`, the part of a segment that starts in it and goes on.
// A segment spanning pieces c0..c1 is then tail[c0] (+) head[c0+1] (+) ... (+) head[c1],
// combined in order in the fix-up. Nothing waits on another block, every slot that
// the fix-up reads was written by the pass (no workspace zeroing), and the result does not
// depend on scheduling (deterministic, also for floating sums).
//
// Two shapes of pass, both generic over the reduction problem (core/reduce_problems.h):
//  * rows: a piece is one tile of consecutive positions of one row, 256 threads x kItems (a
//    block; a warp's 32 x kItems for short rows), each thread kItems consecutive positions
//    loaded first (wide loads when contiguous), so that many blocks per SM keep their loads in
//    flight; a block scan of (fold, segment-start) pairs hands each thread the part of its
//    first segment that earlier threads hold.
//  * columns: when the reduced dimension is strided and neighbouring rows are neighbours in
//    memory (`(T, F)` along T, a padded `(B, T, D)` batch along T), each thread walks a chunk of
//    one row and neighbouring threads take neighbouring rows, so every load is coalesced and
//    segment boundaries are the same across the warp.
#pragma once

#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <limits>

#include "../../core/scan_geometry.h"
#include "warp.cuh"
#include "../launch_context.h"
#include "engine.cuh"  // wide_access_disabled
#include "segment_reduce_warps.cuh"

namespace parprims::cuda {

// The two partial values of every piece (row, chunk), at row * row_step + chunk * chunk_step.
template <class Value>
struct PiecePartials {
  Value* head;
  Value* tail;
  int64_t row_step;
  int64_t chunk_step;
  int64_t chunk_length;  // positions per piece

  PP_HD int64_t at(int64_t row, int64_t chunk) const { return row * row_step + chunk * chunk_step; }
};

// The fold of one piece's positions in order, as they arrive: restarts at a segment start,
// writes a segment that ends after starting in this piece, and hands the rest to the partials.
template <class P>
struct PieceFold {
  using M = typename P::Monoid;
  using Value = typename P::Value;
  Value running;
  bool started_here;  // whether the segment being folded started inside this piece

  // The value at `pos` (segment `segment`), whether it starts or ends its segment, and whether it
  // is the last position of the piece. `writes`: whether this thread stores what ends here (a
  // warp that folds a whole tile as one value keeps the fold in every lane and stores once).
  __device__ __forceinline__ void add(const P& problem, const PiecePartials<Value>& parts, int64_t row,
                                      int64_t chunk, int64_t segment, const Value& v, bool head,
                                      bool ends_segment, bool ends_piece, bool writes = true) {
    if (head) {
      running = v;
      started_here = true;
    } else {
      running = M::combine(running, v);
    }
    if (!writes) return;
    if (ends_segment && started_here) {
      problem.store_final(row, segment, running);
    } else if (ends_segment || ends_piece) {
      (started_here ? parts.tail : parts.head)[parts.at(row, chunk)] = running;
    }
  }
};

// first_segment[c] = the segment holding position c * chunk_length, and first_segment[chunks] the
// one holding the row's last position. Written by the segments rather than searched for by the
// pieces: a thread per segment writes the entries of the pieces whose first position it holds,
// one round of loads where a binary search per piece was about 17 dependent ones; a segment
// that holds the first positions of more than 32 pieces (one huge sequence) has them written by
// its warp. With valid offsets every entry is written once; invalid offsets may leave some
// unwritten, and PieceSegments clamps what it reads into the segments that exist.
// (static: a kernel that is not a template, defined in a header included by several units)
static __global__ void __launch_bounds__(256)
    piece_segments_kernel(const ScanGeometry g, int64_t chunk_length, int64_t chunks, int64_t* first_segment) {
  constexpr int64_t kSerialPieces = 32;
  const int lane = threadIdx.x & 31;
  const int64_t segments = g.num_segments();
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t base = warp * 32; base < segments; base += warps * 32) {  // the same trip count for a whole warp
    const int64_t k = base + lane;
    int64_t c0 = 0, c1 = 0;  // the pieces whose first position lies in segment k: [c0, c1)
    if (k < segments) {
      int64_t lo, hi;
      clamped_bounds(g, k, lo, hi);
      if (hi > lo) {
        c0 = (lo + chunk_length - 1) / chunk_length;
        c1 = (hi + chunk_length - 1) / chunk_length;  // at most chunks
        if (hi == g.len) first_segment[chunks] = k;
      }
    }
    const bool warp_writes = c1 - c0 > kSerialPieces;
    if (!warp_writes) {
      for (int64_t c = c0; c < c1; ++c) first_segment[c] = k;
    }
    unsigned pending = __ballot_sync(kFullMask, warp_writes);
    while (pending != 0) {
      const int src = __ffs(pending) - 1;
      pending &= pending - 1;
      const int64_t s = shfl_idx(k, src), a = shfl_idx(c0, src), b = shfl_idx(c1, src);
      for (int64_t c = a + lane; c < b; c += 32) first_segment[c] = s;
    }
  }
}

// The segments a piece can touch: [first_segment[c], first_segment[c + 1]] (both 0 when there
// are no offsets), clamped into [0, last]: garbage in, garbage out, but no access out of bounds.
struct PieceSegments {
  const int64_t* first_segment;  // null: one segment per row
  int64_t last;                  // the last segment's index
  PP_HD int64_t clamped(int64_t s) const { return s < 0 ? 0 : s > last ? last : s; }
  PP_HD int64_t lo(int64_t chunk) const { return first_segment ? clamped(first_segment[chunk]) : 0; }
  PP_HD int64_t hi(int64_t chunk) const { return first_segment ? clamped(first_segment[chunk + 1]) : 0; }
};

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

template <class P>
__global__ void __launch_bounds__(256)
    segment_reduce_columns_kernel(const P problem, const ScanGeometry g, const PiecePartials<typename P::Value> parts,
                                  const PieceSegments segments, int64_t chunks) {
  using M = typename P::Monoid;
  using Value = typename P::Value;
  constexpr int kUnroll = 8;  // loads in flight per thread
  const int64_t pieces = g.rows * chunks;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t piece = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; piece < pieces; piece += stride) {
    const int64_t chunk = piece / g.rows;  // rows fastest: neighbouring threads, neighbouring rows
    const int64_t row = piece - chunk * g.rows;
    const int64_t begin = chunk * parts.chunk_length;
    const int64_t end = min(begin + parts.chunk_length, g.len);
    const auto cursor = problem.cursor(row);
    SegmentWalker w;
    w.seek(g, begin, segments.lo(chunk), segments.lo(chunk));
    PieceFold<P> fold{M::identity(), false};
    if (!w.starts_segment(g, begin) && w.next_start >= end) {
      // No segment starts in the chunk (the common case): fold, then hand the fold on once.
      Value acc = M::identity();
      for (int64_t base = begin; base < end; base += kUnroll) {
        Value values[kUnroll];
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) values[k] = base + k < end ? problem.load(cursor, base + k) : M::identity();
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) acc = M::combine(acc, values[k]);
      }
      fold.add(problem, parts, row, chunk, w.segment, acc, false, w.is_last(end - 1), true);
      continue;
    }
    for (int64_t base = begin; base < end; base += kUnroll) {
      Value values[kUnroll];
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) values[k] = base + k < end ? problem.load(cursor, base + k) : M::identity();
#pragma unroll
      for (int k = 0; k < kUnroll; ++k) {
        const int64_t pos = base + k;
        if (pos < end) {
          const bool head = pos == begin ? w.starts_segment(g, pos) : w.enter(g, pos);
          fold.add(problem, parts, row, chunk, w.segment, values[k], head, w.is_last(pos), pos == end - 1);
        }
      }
    }
  }
}

// The segments that cross pieces, from their partials, in order (only those longer than
// `min_length`: the warp pass folds the shorter ones whole): one thread per (row, segment),
// rows fastest (neighbouring threads share the segment's offsets and read neighbouring partials
// in the column layout), folding head[c0+1 .. c1] itself when the segment spans few pieces; the
// rare segment that spans more (one huge sequence) is folded by the whole warp.
template <class P>
__global__ void __launch_bounds__(256)
    segment_reduce_fixup_kernel(const P problem, const ScanGeometry g, const PiecePartials<typename P::Value> parts,
                                int64_t min_length) {
  using M = typename P::Monoid;
  using Value = typename P::Value;
  constexpr int64_t kSerialSpan = 32;
  const int lane = threadIdx.x & 31;
  const int64_t items = g.rows * g.num_segments();
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t base = warp * 32; base < items; base += warps * 32) {  // the same trip count for a whole warp
    const int64_t item = base + lane;
    int64_t row = 0, segment = 0, c0 = 0, c1 = 0;
    if (item < items) {
      segment = item / g.rows;
      row = item - segment * g.rows;
      // Clamped, so that invalid offsets read only slots that exist (their values are then wrong).
      int64_t lo, hi;
      clamped_bounds(g, segment, lo, hi);
      if (hi - lo > min_length) {  // an empty segment has the empty result the host wrote
        c0 = lo / parts.chunk_length;
        c1 = (hi - 1) / parts.chunk_length;
      }
    }
    const bool warp_folds = c1 - c0 > kSerialSpan;
    if (c1 > c0 && !warp_folds) {  // c0 == c1: written by the pass
      Value acc = parts.tail[parts.at(row, c0)];
      for (int64_t c = c0 + 1; c <= c1; ++c) acc = M::combine(acc, parts.head[parts.at(row, c)]);
      problem.store_final(row, segment, acc);
    }
    unsigned pending = __ballot_sync(kFullMask, warp_folds);
    while (pending != 0) {
      const int src = __ffs(pending) - 1;
      pending &= pending - 1;
      const int64_t r = shfl_idx(row, src), s = shfl_idx(segment, src);
      const int64_t a = shfl_idx(c0, src), b = shfl_idx(c1, src);
      // Lane l folds a contiguous share of head[a+1 .. b]; the warp scan keeps the order. The
      // loads go 64 bytes at a time: one huge sequence over 2^25 float32 has 8192 pieces of
      // 4096 in the rows pass, 256 a lane, and a load at a time would be 256 round trips.
      constexpr int kBatch = sizeof(Value) <= 4 ? 16 : sizeof(Value) <= 8 ? 8 : 4;
      const int64_t share = (b - a + 31) / 32;
      const int64_t from = a + 1 + lane * share;
      const int64_t to = min(from + share, b + 1);
      Value acc = M::identity();
      for (int64_t c = from; c < to; c += kBatch) {
        Value batch[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) batch[j] = c + j < to ? parts.head[parts.at(r, c + j)] : M::identity();
#pragma unroll
        for (int j = 0; j < kBatch; ++j) acc = M::combine(acc, batch[j]);
      }
      acc = shfl_idx(warp_inclusive_scan<M>(acc), 31);
      if (lane == 0) problem.store_final(r, s, M::combine(parts.tail[parts.at(r, a)], acc));
    }
  }
}

// The engine that `run_reduce` (host/reduce_dispatch.h) drives on CUDA: picks the pass by
// layout, then the fix-up when a row has more than one piece.
struct SegmentReduceEngine {
  static constexpr bool kIsCuda = true;  // selects the accumulate type (host/scan_dispatch.h)
  LaunchContext ctx;                     // the caller's device is current

  // Positions per thread of the column pass: enough threads to fill the GPU about eight times
  // over, at least 16 positions each so that the fix-up stays small.
  static int64_t column_chunk_length(const ScanGeometry& g) {
    const int64_t threads_wanted = int64_t(1) << 20;
    const int64_t per_thread = (g.rows * g.len + threads_wanted - 1) / threads_wanted;
    return std::max<int64_t>(16, per_thread);
  }

  // The tile of the rows pass: a block's (kThreads x kItems positions) for rows of at least half
  // of that (at least half of a block's threads have values), else a warp's (32 x kItems).
  template <class Value>
  static int tile_threads(const ScanGeometry& g) {
    using Policy = SegmentReducePolicy<Value>;
    return 2 * g.len >= int64_t{Policy::kThreads} * Policy::kItems ? Policy::kThreads : 32;
  }

  // Rows whose sequences are this long on average (positions) take the warp pass.
  static constexpr int64_t kWarpPassMinAverage = 128;

  // segment_reduce_warps.cuh: a warp per sequence, pieces for the long ones, then the fix-up of
  // the long ones.
  template <class P>
  void run_warp_pass(const P& problem, const ScanGeometry& g) const {
    using Value = typename P::Value;
    using Policy = SegmentWarpsPolicy;
    constexpr int64_t kMaxBlocks = int64_t(1) << 20;  // the kernel loops over what is left
    const int64_t pieces = (g.len + Policy::kPieceLength - 1) / Policy::kPieceLength;
    PiecePartials<Value> parts;
    parts.head = static_cast<Value*>(ctx.workspace->allocate(2 * g.rows * pieces * sizeof(Value)));
    parts.tail = parts.head + g.rows * pieces;
    parts.row_step = pieces;
    parts.chunk_step = 1;
    parts.chunk_length = Policy::kPieceLength;
    const int64_t warps = g.rows * (pieces + g.num_segments());
    constexpr int64_t kWarpsPerBlock = Policy::kThreads / 32;
    const int64_t blocks = std::min<int64_t>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock, kMaxBlocks);
    segment_reduce_warps_kernel<P, PiecePartials<Value>><<<static_cast<unsigned>(blocks), Policy::kThreads, 0,
                                                           ctx.stream>>>(problem, g, parts, pieces,
                                                                         !wide_access_disabled());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (pieces > 1) {
      const int64_t items = g.rows * g.num_segments();
      const int64_t fixup_blocks = std::min<int64_t>((items + 255) / 256, kMaxBlocks);
      segment_reduce_fixup_kernel<P><<<static_cast<unsigned>(fixup_blocks), 256, 0, ctx.stream>>>(
          problem, g, parts, Policy::kPieceLength);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }

  template <class P>
  void operator()(const P& problem, const ScanGeometry& g, const ScanLayout& layout) const {
    using Value = typename P::Value;
    TORCH_INTERNAL_ASSERT(!g.reverse && !g.exclusive, "segment reductions run forward and inclusive");
    if (g.rows == 0 || g.len == 0) return;
    const cudaStream_t stream = ctx.stream;
    const bool columns = layout.rows_adjacent && g.rows > 1;
    if (!columns && g.segments.offsets != nullptr && g.len >= kWarpPassMinAverage * g.num_segments()) {
      return run_warp_pass(problem, g);
    }
    using Policy = SegmentReducePolicy<Value>;
    const int row_tile_threads = tile_threads<Value>(g);
    const int64_t chunk_length = columns ? column_chunk_length(g) : int64_t{row_tile_threads} * Policy::kItems;
    const int64_t chunks = (g.len + chunk_length - 1) / chunk_length;
    const int64_t pieces = g.rows * chunks;
    void* partials = ctx.workspace->allocate(2 * pieces * sizeof(Value));
    PieceSegments segments{nullptr, g.num_segments() - 1};
    if (g.segments.offsets != nullptr) {
      auto* first_segment = static_cast<int64_t*>(ctx.workspace->allocate((chunks + 1) * sizeof(int64_t)));
      segments.first_segment = first_segment;
      const int64_t blocks = std::min<int64_t>((g.num_segments() + 255) / 256, int64_t(1) << 16);
      piece_segments_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(g, chunk_length, chunks,
                                                                             first_segment);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    PiecePartials<Value> parts;
    parts.head = static_cast<Value*>(partials);
    parts.tail = parts.head + pieces;
    parts.chunk_length = chunk_length;
    constexpr int64_t kMaxBlocks = int64_t(1) << 20;  // the kernels loop over what is left
    if (columns) {
      parts.row_step = 1;
      parts.chunk_step = g.rows;
      const int64_t blocks = std::min<int64_t>((pieces + 255) / 256, kMaxBlocks);
      segment_reduce_columns_kernel<P><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(problem, g, parts, segments, chunks);
    } else {
      parts.row_step = chunks;
      parts.chunk_step = 1;
      // The pass names a tile's segments relative to its first one, in an int.
      TORCH_CHECK(g.num_segments() <= std::numeric_limits<int>::max(), "segment reduction: more than 2^31 - 1 sequences");
      const int64_t tiles_per_block = Policy::kThreads / row_tile_threads;
      const int64_t blocks = (pieces + tiles_per_block - 1) / tiles_per_block;
      TORCH_CHECK(blocks < (int64_t(1) << 31), "segment reduction: too many pieces");
      const bool wide = !wide_access_disabled();
      if (row_tile_threads == Policy::kThreads) {
        segment_reduce_rows_kernel<P, Policy::kThreads><<<static_cast<unsigned>(blocks), Policy::kThreads, 0, stream>>>(
            problem, g, parts, segments, chunks, pieces, wide);
      } else {
        segment_reduce_rows_kernel<P, 32><<<static_cast<unsigned>(blocks), Policy::kThreads, 0, stream>>>(
            problem, g, parts, segments, chunks, pieces, wide);
      }
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (chunks > 1) {
      const int64_t items = g.rows * g.num_segments();
      const int64_t blocks = std::min<int64_t>((items + 255) / 256, kMaxBlocks);
      segment_reduce_fixup_kernel<P><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(problem, g, parts, 0);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }
};

}  // namespace parprims::cuda
