// The pieces of the segment reductions (segment_reduce.cuh): every pass cuts a row into pieces
// of fixed length; a piece writes the segments that start and end inside it and leaves two
// partial values (head, tail) for the fix-up. Here: those partials, the in-order fold of a
// piece's positions, and the first segment of every piece.
#pragma once

#include "../../core/scan_geometry.h"
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

}  // namespace parprims::cuda
