// The warp pass of the segment reductions (segment_reduce.cuh): a warp per sequence, for rows
// whose sequences are long enough on average to give a warp work (a few hundred positions and
// more; shorter ones go to the tile pass, which packs many sequences into one tile).
//
// The tile pass cuts a row into fixed tiles and pays, per tile, for finding the tile's sequences
// (two dependent loads), marking their starts in shared memory and a segmented block scan,
// whether or not the row's sequences are long. Here a warp reads its sequence's two offsets and
// folds the sequence in 16-byte loads (four a lane in flight), lanes in a fixed order and a warp
// tree at the end: no shared memory, no barrier, no segment test per position, and the result
// does not depend on scheduling.
//
// A warp per sequence would leave one huge sequence to one warp. So a sequence longer than a
// piece (kPieceLength positions) is not folded by its warp: the row is also cut into pieces,
// and a piece warp folds the piece's part of such a sequence into the same `head` / `tail`
// partials as the tile pass (head: the part of a long sequence that started before the piece;
// tail: the part of one that starts in it and goes on), which the fix-up combines in order. A
// piece warp finds the sequences at its two ends by 32-way searches over the offsets (four
// rounds of loads for 65536 sequences, the two searches in the same rounds), so nothing is
// computed ahead for it. The piece warps come first in the grid: long sequences start early
// and the short ones fill in behind.
//
// Measured (benchmarks/NOTES.md, H200): 3-10 % faster than the tile pass on the rows it takes,
// about 0.55 of copy bandwidth; a warp's chain of round trips (offsets, loads, tree) with 25
// warps resident an SM leaves DRAM half busy.
#pragma once

#include <type_traits>

#include "segment_search.cuh"
#include "warp.cuh"

namespace parprims::cuda {

struct SegmentWarpsPolicy {
  static constexpr int kThreads = 128;         // 4 warps: a block retires with its slowest warp
  static constexpr int kMinBlocksPerSM = 8;    // 32 warps an SM, 64 registers
  static constexpr int64_t kPieceLength = 8192;  // positions; longer sequences are folded by pieces
  static constexpr int kRun = 4;               // positions a load_run takes (16 bytes of float32)
  // Runs a lane has in flight per round: 64 bytes of accumulators (float32: four 16-byte loads).
  template <class Value>
  static constexpr int kRuns = sizeof(Value) <= 4 ? 4 : sizeof(Value) <= 8 ? 2 : 1;
};

// The fold of positions [begin, end) of one row by a warp; every lane gets it. Lane l takes the
// runs of kRun positions l, l + 32, ... counted from the first position where wide loads are
// aligned (the positions before it go one a lane), kRuns of them in flight a round; the last
// round's runs are cut at `end` (a partial run loads element by element). Without wide loads (a
// mask, a strided or misaligned input) every run loads element by element.
template <class P>
__device__ __forceinline__ typename P::Value warp_fold(const P& problem, const typename P::Cursor& cursor,
                                                      int64_t begin, int64_t end, bool wide) {
  using M = typename P::Monoid;
  using Value = typename P::Value;
  constexpr int kRun = SegmentWarpsPolicy::kRun;
  constexpr int kRuns = SegmentWarpsPolicy::kRuns<Value>;
  constexpr int64_t kRound = 32 * kRun * kRuns;
  const int lane = threadIdx.x & 31;
  Value acc = M::identity();
  int64_t body = wide ? problem.template first_wide_position<kRun>(cursor, begin) : -1;
  wide = body >= 0;
  if (!wide || body > end) body = begin;
  if (lane < body - begin) acc = problem.load(cursor, begin + lane);  // fewer than kRun <= 32 positions
  for (int64_t pos = body; pos < end; pos += kRound) {
    Value v[kRuns][kRun];
#pragma unroll
    for (int r = 0; r < kRuns; ++r) {
      const int64_t first = pos + (r * 32 + lane) * kRun;
      // From `body` on, every whole run is aligned: load_run takes it.
      if (!(first + kRun <= end && wide && problem.template load_run<kRun>(cursor, first, v[r]))) {
#pragma unroll
        for (int k = 0; k < kRun; ++k) v[r][k] = first + k < end ? problem.load(cursor, first + k) : M::identity();
      }
    }
#pragma unroll
    for (int r = 0; r < kRuns; ++r) {
#pragma unroll
      for (int k = 0; k < kRun; ++k) acc = M::combine(acc, v[r][k]);
    }
  }
  return warp_reduce<M>(acc);
}

// What a warp folds: up to two ranges of one row, each written as a partial (`to` not null) or as
// the segment's result.
template <class Value>
struct WarpFolds {
  int64_t row = 0;
  int count = 0;
  int64_t begin0 = 0, end0 = 0, begin1 = 0, end1 = 0;
  Value* to0 = nullptr;
  Value* to1 = nullptr;
  int64_t segment = 0;

  __device__ __forceinline__ void add(int64_t begin, int64_t end, Value* to) {
    if (count == 0) {
      begin0 = begin, end0 = end, to0 = to;
    } else {
      begin1 = begin, end1 = end, to1 = to;
    }
    ++count;
  }
};

// A piece's parts of the long sequences at its two ends.
template <class Parts, class Value = typename std::remove_pointer<decltype(Parts::head)>::type>
__device__ __forceinline__ WarpFolds<Value> piece_folds(const ScanGeometry& g, const Parts& parts, int64_t row,
                                                        int64_t piece) {
  constexpr int64_t kPiece = SegmentWarpsPolicy::kPieceLength;
  WarpFolds<Value> f;
  f.row = row;
  const int64_t begin = piece * kPiece;
  const int64_t end = min(begin + kPiece, g.len);
  const int64_t at = parts.at(row, piece);
  int64_t segments[2];
  warp_find_segments(g, {begin, end < g.len ? end : begin}, segments);
  int64_t a, b;
  clamped_bounds(g, segments[0], a, b);
  bool tail_taken = false;
  if (b - a > kPiece) {
    if (a < begin) {
      f.add(begin, min(b, end), parts.head + at);  // a long sequence from before the piece: a head
    } else {
      f.add(begin, end, parts.tail + at);  // one that starts on the piece's first position and goes on
      tail_taken = true;
    }
  }
  if (!tail_taken && end < g.len) {  // a long sequence that starts inside and goes on: a tail
    clamped_bounds(g, segments[1], a, b);
    if (b - a > kPiece && a > begin && a < end) f.add(a, end, parts.tail + at);
  }
  return f;
}

// Warps [0, rows * pieces) are piece warps (row-major), the rest sequence warps (row-major).
template <class P, class Parts>
__global__ void __launch_bounds__(SegmentWarpsPolicy::kThreads, SegmentWarpsPolicy::kMinBlocksPerSM)
    segment_reduce_warps_kernel(const P problem, const ScanGeometry g, const Parts parts, int64_t pieces, bool wide) {
  using Value = typename P::Value;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (SegmentWarpsPolicy::kThreads / 32);
  const int64_t piece_warps = g.rows * pieces;
  const int64_t items = piece_warps + g.rows * g.num_segments();
  for (int64_t item = (static_cast<int64_t>(blockIdx.x) * SegmentWarpsPolicy::kThreads + threadIdx.x) / 32;
       item < items; item += warps) {
    WarpFolds<Value> f;
    if (item < piece_warps) {
      f = piece_folds(g, parts, item / pieces, item % pieces);
    } else {  // a sequence, folded whole unless it is long (the pieces and the fix-up have it)
      const int64_t k = item - piece_warps;
      f.row = k / g.num_segments();
      f.segment = k - f.row * g.num_segments();
      clamped_bounds(g, f.segment, f.begin0, f.end0);
      const int64_t length = f.end0 - f.begin0;
      f.count = length > 0 && length <= SegmentWarpsPolicy::kPieceLength;  // empty: the host wrote its result
    }
    const auto cursor = problem.cursor(f.row);
#pragma unroll 1
    for (int j = 0; j < f.count; ++j) {
      const Value value = warp_fold(problem, cursor, j == 0 ? f.begin0 : f.begin1, j == 0 ? f.end0 : f.end1, wide);
      Value* to = j == 0 ? f.to0 : f.to1;
      if ((threadIdx.x & 31) == 0) {
        if (to != nullptr) *to = value; else problem.store_final(f.row, f.segment, value);
      }
    }
  }
}

}  // namespace parprims::cuda
