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
//  * rows: a warp takes a piece of consecutive positions of one row and walks it in tiles of
//    32 x kItems, each lane kItems of them (wide loads when contiguous), carrying the fold of
//    the current segment from tile to tile; a warp scan of (value, segment-start) pairs hands
//    each lane the part of its first segment that earlier lanes and tiles hold.
//  * columns: when the reduced dimension is strided and neighbouring rows are neighbours in
//    memory (`(T, F)` along T, a padded `(B, T, D)` batch along T), each thread walks a chunk of
//    one row and neighbouring threads take neighbouring rows, so every load is coalesced and
//    segment boundaries are the same across the warp.
#pragma once

#include <c10/cuda/CUDAException.h>

#include <algorithm>

#include "../../core/scan_geometry.h"
#include "warp.cuh"
#include "../launch_context.h"
#include "engine.cuh"  // wide_access_disabled

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

// first_segment[c] = the segment holding position c * chunk_length (the last one for c = chunks):
// found once per piece here, in parallel, instead of by a search at the start of every piece.
// (static: a kernel that is not a template, defined in a header included by several units)
static __global__ void __launch_bounds__(256)
    piece_segments_kernel(const ScanGeometry g, int64_t chunk_length, int64_t chunks, int64_t* first_segment) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c <= chunks; c += stride) {
    SegmentWalker w;
    w.seek(g, min(c * chunk_length, g.len - 1));
    first_segment[c] = w.segment;
  }
}

// The segments a piece can touch: [first_segment[c], first_segment[c + 1]] (both 0 when there
// are no offsets).
struct PieceSegments {
  const int64_t* first_segment;  // null: one segment per row
  PP_HD int64_t lo(int64_t chunk) const { return first_segment ? first_segment[chunk] : 0; }
  PP_HD int64_t hi(int64_t chunk) const { return first_segment ? first_segment[chunk + 1] : 0; }
};

template <class Value>
struct SegmentReducePolicy {
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kMinBlocksPerSM = 4;  // 64 registers: more warps, more loads in flight
  static constexpr int kItems = sizeof(Value) <= 4 ? 16 : sizeof(Value) <= 8 ? 8 : 4;
  static constexpr int kWarpTile = 32 * kItems;  // consecutive positions a warp folds per step
};

// The rows pass: a warp owns one piece (tiles_per_piece warp tiles of one row) and walks it tile
// by tile, the next tile's loads in flight while it folds the current one, with the fold of the
// current segment carried across tiles in registers. No barrier, no look-back, no shared memory.
//  * A tile in which no segment starts after its first position (every tile of an
//    unsegmented row; most tiles when segments are longer than a tile) is one fold: each lane
//    folds its kItems positions, the warp combines the lanes, and the fold moves on.
//  * A tile that holds segment starts: each lane finds its first segment (a search among the
//    piece's segments), folds its positions, and a segmented warp scan hands it the part of that
//    segment that the earlier lanes and tiles hold; each lane then writes the segments that end
//    in its positions.
template <class P>
__global__ void __launch_bounds__(SegmentReducePolicy<typename P::Value>::kThreads,
                                  SegmentReducePolicy<typename P::Value>::kMinBlocksPerSM)
    segment_reduce_rows_kernel(const P problem, const ScanGeometry g, const PiecePartials<typename P::Value> parts,
                               const PieceSegments segments, int64_t chunks, int64_t pieces, bool wide) {
  using M = typename P::Monoid;
  using Value = typename P::Value;
  using Seg = Segmented<M>;
  using Lifted = typename Seg::value_type;
  using Policy = SegmentReducePolicy<Value>;
  constexpr int kItems = Policy::kItems;
  __shared__ Value staged_values[Policy::kWarps][Policy::kWarpTile];
  const int lane = threadIdx.x & 31;
  Value* warp_values = staged_values[threadIdx.x >> 5];
  const int64_t piece = static_cast<int64_t>(blockIdx.x) * Policy::kWarps + (threadIdx.x >> 5);
  if (piece >= pieces) return;  // the whole warp
  const int64_t row = piece / chunks;
  const int64_t chunk = piece - row * chunks;
  const int64_t piece_begin = chunk * parts.chunk_length;
  const int64_t piece_end = min(piece_begin + parts.chunk_length, g.len);
  const auto cursor = problem.cursor(row);
  // This lane's positions of the tile at tile_begin: [first, first + count).
  auto lane_first = [&](int64_t tile_begin) { return tile_begin + static_cast<int64_t>(lane) * kItems; };
  auto lane_count = [&](int64_t first) {
    return static_cast<int>(max(int64_t(0), min(int64_t(kItems), piece_end - first)));
  };
  auto load_tile = [&](int64_t tile_begin, Value(&v)[kItems]) {
    const int64_t first = lane_first(tile_begin);
    const int count = lane_count(first);
    if (count == kItems && wide && problem.template load_run<kItems>(cursor, first, v)) return;
#pragma unroll
    for (int k = 0; k < kItems; ++k) v[k] = k < count ? problem.load(cursor, first + k) : M::identity();
  };

  // The warp's place, the same in every lane: the segment holding the tile's first position,
  // and whether a segment starts there.
  SegmentWalker at;
  at.seek(g, piece_begin, segments.lo(chunk), segments.lo(chunk));
  bool tile_starts = at.starts_segment(g, piece_begin);
  PieceFold<P> fold{M::identity(), false};  // the warp's fold up to the tile
  for (int64_t tile_begin = piece_begin; tile_begin < piece_end; tile_begin += Policy::kWarpTile) {
    const int64_t tile_end = min(tile_begin + Policy::kWarpTile, piece_end);
    Value values[kItems];
    load_tile(tile_begin, values);
    const bool ends_piece = tile_end == piece_end;
    if (at.next_start >= tile_end) {
      // ---- one segment from the tile's first position to its end ----
      Value folded = values[0];
#pragma unroll
      for (int k = 1; k < kItems; ++k) folded = M::combine(folded, values[k]);
      folded = warp_reduce<M>(folded);
      fold.add(problem, parts, row, chunk, at.segment, folded, tile_starts, at.is_last(tile_end - 1), ends_piece,
               lane == 0);
    } else {
      // ---- segment starts inside the tile ----
      // A lane whose positions hold a segment start walks them as runs (the positions of one
      // segment), folding each run in a loop over its values staged in shared memory. (A walk
      // unrolled over the positions in registers, a copy per path and type, overflowed the
      // instruction cache: ncu had most of the kernel's stalls waiting for instruction fetch.)
      Value* staged = warp_values + lane;  // value k at staged[32 * k]: no bank conflicts
#pragma unroll
      for (int k = 0; k < kItems; ++k) staged[32 * k] = values[k];
      const int64_t first = lane_first(tile_begin);
      const int count = lane_count(first);
      const int64_t last = first + count - 1;
      SegmentWalker start = at;
      if (count > 0 && first != tile_begin) start.seek(g, first, at.segment, segments.hi(chunk));
      // visit(walker, value, head, run_last) for each run in order: the walker on the run's
      // segment, the fold of the run, whether the run starts its segment, its last position.
      auto for_each_run = [&](SegmentWalker& w, auto&& visit) {
        bool head = count > 0 && w.starts_segment(g, first);
        for (int k = 0; k < count;) {
          const int n = static_cast<int>(min(w.next_start, last + 1) - first);  // the run is [k, n)
          Value v = staged[32 * k];
#pragma unroll 1
          for (int j = k + 1; j < n; ++j) v = M::combine(v, staged[32 * j]);
          visit(w, v, head, first + n - 1);
          k = n;
          if (k < count) head = w.enter(g, first + k);
        }
      };
      // Most lanes' positions hold no segment start: one fold of the values (the padding is the
      // identity) and no walk.
      const bool plain = count > 0 && !start.starts_segment(g, first) && start.next_start > last;
      Lifted mine = Seg::identity();
      if (plain) {
        Value folded = values[0];
#pragma unroll
        for (int k = 1; k < kItems; ++k) folded = M::combine(folded, values[k]);
        mine = Lifted{folded, false};
      } else {
        SegmentWalker w = start;
        for_each_run(w, [&](SegmentWalker&, const Value& v, bool head, int64_t) { mine = Seg::combine(mine, Lifted{v, head}); });
      }
      const Lifted inclusive = warp_inclusive_scan<Seg>(mine);
      Lifted earlier = shfl_up(inclusive, 1);
      if (lane == 0) earlier = Seg::identity();
      const Lifted before{fold.running, fold.started_here};
      const Lifted carry = Seg::combine(before, earlier);
      PieceFold<P> lane_fold{carry.value, carry.head};
      SegmentWalker w = start;
      if (plain) {
        lane_fold.add(problem, parts, row, chunk, w.segment, mine.value, false, w.is_last(last), last == piece_end - 1);
      } else {
        for_each_run(w, [&](SegmentWalker& on, const Value& v, bool head, int64_t run_last) {
          lane_fold.add(problem, parts, row, chunk, on.segment, v, head, on.is_last(run_last), run_last == piece_end - 1);
        });
      }
      // The warp moves on with the fold and the segment of the tile's last position.
      const Lifted after = Seg::combine(before, shfl_idx(inclusive, 31));
      fold.running = after.value;
      fold.started_here = after.head;
      const int last_lane = static_cast<int>((tile_end - 1 - tile_begin) / kItems);
      at.segment = shfl_idx(w.segment, last_lane);
      at.next_start = shfl_idx(w.next_start, last_lane);
    }
    if (ends_piece) break;
    // A segment that ends with the tile hands the next tile a fresh one.
    tile_starts = at.enter(g, tile_end);
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

// The segments that cross pieces, from their partials, in order: one thread per (row, segment),
// rows fastest (neighbouring threads share the segment's offsets and read neighbouring partials
// in the column layout), folding head[c0+1 .. c1] itself when the segment spans few pieces; the
// rare segment that spans more (one huge sequence) is folded by the whole warp.
template <class P>
__global__ void __launch_bounds__(256)
    segment_reduce_fixup_kernel(const P problem, const ScanGeometry g, const PiecePartials<typename P::Value> parts) {
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
      const int64_t lo = max(int64_t(0), min(g.len, g.segment_start(segment)));
      const int64_t hi = max(int64_t(0), min(g.len, g.segment_start(segment + 1)));
      if (hi > lo) {  // an empty segment has the empty result the host wrote
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
      // Lane l folds a contiguous share of head[a+1 .. b]; the warp scan keeps the order.
      const int64_t share = (b - a + 31) / 32;
      const int64_t from = a + 1 + lane * share;
      const int64_t to = min(from + share, b + 1);
      Value acc = M::identity();
      for (int64_t c = from; c < to; ++c) acc = M::combine(acc, parts.head[parts.at(r, c)]);
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

  // Positions per warp of the rows pass: whole warp tiles, as many as leave about four warps
  // per warp slot of the GPU (the last wave's idle slots stay a small share), at most 32 tiles.
  template <class Value>
  static int64_t row_chunk_length(const ScanGeometry& g, int sm_count) {
    using Policy = SegmentReducePolicy<Value>;
    const int64_t tiles_per_row = (g.len + Policy::kWarpTile - 1) / Policy::kWarpTile;
    const int64_t warps_wanted = int64_t{4} * sm_count * Policy::kMinBlocksPerSM * Policy::kWarps;
    const int64_t tiles_per_piece = std::clamp<int64_t>(g.rows * tiles_per_row / warps_wanted, 1, 32);
    return std::min(tiles_per_row, tiles_per_piece) * Policy::kWarpTile;
  }

  template <class P>
  void operator()(const P& problem, const ScanGeometry& g, const ScanLayout& layout) const {
    using Value = typename P::Value;
    TORCH_INTERNAL_ASSERT(!g.reverse && !g.exclusive, "segment reductions run forward and inclusive");
    if (g.rows == 0 || g.len == 0) return;
    const cudaStream_t stream = ctx.stream;
    const bool columns = layout.rows_adjacent && g.rows > 1;
    const int64_t chunk_length = columns ? column_chunk_length(g) : row_chunk_length<Value>(g, ctx.sm_count);
    const int64_t chunks = (g.len + chunk_length - 1) / chunk_length;
    const int64_t pieces = g.rows * chunks;
    void* partials = ctx.workspace->allocate(2 * pieces * sizeof(Value));
    PieceSegments segments{nullptr};
    if (g.segments.offsets != nullptr) {
      auto* first_segment = static_cast<int64_t*>(ctx.workspace->allocate((chunks + 1) * sizeof(int64_t)));
      segments.first_segment = first_segment;
      const int64_t blocks = std::min<int64_t>((chunks + 256) / 256, int64_t(1) << 16);
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
      using Policy = SegmentReducePolicy<Value>;
      parts.row_step = chunks;
      parts.chunk_step = 1;
      const int64_t blocks = (pieces + Policy::kWarps - 1) / Policy::kWarps;
      TORCH_CHECK(blocks < (int64_t(1) << 31), "segment reduction: too many pieces");
      segment_reduce_rows_kernel<P><<<static_cast<unsigned>(blocks), Policy::kThreads, 0, stream>>>(
          problem, g, parts, segments, chunks, pieces, !wide_access_disabled());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (chunks > 1) {
      const int64_t items = g.rows * g.num_segments();
      const int64_t blocks = std::min<int64_t>((items + 255) / 256, kMaxBlocks);
      segment_reduce_fixup_kernel<P><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(problem, g, parts);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  }
};

}  // namespace parprims::cuda
