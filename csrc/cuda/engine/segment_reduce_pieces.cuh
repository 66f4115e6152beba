// The pieces of the segment reductions (segment_reduce.cuh): every pass cuts a row into pieces
// of fixed length; a piece writes the segments that start and end inside it and leaves two
// partial values (head, tail) for the fix-up. Here: those partials, the first segment of every
// piece, and the fix-up that combines the partials of the segments that cross pieces.
#pragma once

#include "../../core/scan_geometry.h"
#include "dependent_launch.cuh"
#include "segment_search.cuh"
#include "warp.cuh"

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

// The edges between pieces that the fix-up looks at: all of them, or only the first when every
// row is one segment (which crosses every edge, and the first is where its fold begins).
PP_HD int64_t fixup_edges(const PieceSegments& segments, int64_t chunks) {
  return segments.first_segment != nullptr ? chunks - 1 : 1;
}

// The segments that cross pieces, from their partials, in order: a thread per (boundary c
// between pieces c - 1 and c, row), rows fastest (neighbouring threads share the boundary and
// read neighbouring partials in the columns layout). The segment holding a boundary's first
// position is folded by the thread of the first boundary it crosses, tail[c0] (+) head[c0 + 1]
// (+) ... (+) head[c1], itself when the segment spans few pieces; the rare one that spans more
// (one huge sequence) is folded by the whole warp. So the work follows the pieces, not the
// segments (a (T, 64) input of 2^20 positions in 65536 sequences: 0.8 million threads, where a
// thread per (row, segment) was 4 million). Launched as a dependent of the pass (launch_fixup);
// it reads the segments' bounds while the pass finishes, unless the pass writes first_segment.
template <class P>
__global__ void __launch_bounds__(256)
    segment_reduce_fixup_kernel(const P problem, const ScanGeometry g, const PiecePartials<typename P::Value> parts,
                                const PieceSegments segments, int64_t chunks, bool segments_from_pass) {
  using M = typename P::Monoid;
  using Value = typename P::Value;
  constexpr int64_t kSerialSpan = 32;
  const int lane = threadIdx.x & 31;
  const int64_t items = g.rows * fixup_edges(segments, chunks);
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  if (segments_from_pass) wait_for_prerequisite_grid();
  for (int64_t base = warp * 32; base < items; base += warps * 32) {  // the same trip count for a whole warp
    const int64_t item = base + lane;
    int64_t row = 0, segment = 0, c0 = 0, c1 = 0;
    if (item < items) {
      const int64_t c = item / g.rows + 1;
      row = item - (c - 1) * g.rows;
      segment = segments.lo(c);
      // Clamped, so that invalid offsets read only slots that exist (their values are then wrong).
      int64_t lo, hi;
      clamped_bounds(g, segment, lo, hi);
      const int64_t boundary = c * parts.chunk_length;
      if (lo < boundary && lo >= boundary - parts.chunk_length && hi > boundary) {
        c0 = c - 1;
        c1 = (hi - 1) / parts.chunk_length;
      }
    }
    wait_for_prerequisite_grid();  // the pass's partials (the bounds above overlap its end)
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

}  // namespace parprims::cuda
