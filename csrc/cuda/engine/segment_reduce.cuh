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
// The passes, all generic over the reduction problem (core/reduce_problems.h), share the pieces
// and their partials and the fix-up (segment_reduce_pieces.cuh); this file holds the columns pass
// and the engine that picks a pass:
//  * rows (segment_reduce_tiles.cuh): a piece is one tile of consecutive positions of one
//    row, 256 threads x kItems (a block; a warp's 32 x kItems for short rows), each thread
//    kItems consecutive positions loaded first (wide loads when contiguous), so that many
//    blocks per SM keep their loads in flight; a block scan of (fold, segment-start) pairs
//    hands each thread the part of its first segment that earlier threads hold.
//  * rows of long sequences (segment_reduce_stream.cuh): a warp streams a piece of about one
//    resident warp's share of the input in 16-byte loads, two rounds in flight, and folds
//    without a test per position until a sequence ends.
//  * columns: when the reduced dimension is strided and neighbouring rows are neighbours in
//    memory (`(T, F)` along T, a padded `(B, T, D)` batch along T), each thread walks a chunk of
//    one row, or of 4 rows whose elements it reads as one word a position where they lie side
//    by side, and neighbouring threads take neighbouring rows, so every load is coalesced and
//    segment boundaries are the same across the threads of a chunk.
#pragma once

#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "../../core/scan_geometry.h"
#include "../../core/vector_io.h"
#include "warp.cuh"
#include "../launch_context.h"
#include "dependent_launch.cuh"
#include "engine.cuh"  // wide_access_disabled
#include "segment_reduce_pieces.cuh"
#include "segment_reduce_tiles.cuh"
#include "segment_reduce_stream.cuh"

namespace parprims::cuda {

template <class P>
struct SegmentColumnsPolicy {
  static constexpr int kThreads = 256;
  // With two batches in flight a thread, 3 blocks an SM (at most 80 registers, 24 warps) keep
  // about as many bytes in flight as the stream pass where elements are read as the 4-byte values
  // they are folded in; half elements (widened when folded) and (sum, count) pairs spill at 80
  // registers, and take 2 (at most 128).
  static constexpr int kMinBlocksPerSM =
      sizeof(typename P::Value) == 4 && sizeof(typename P::Input) == 4 ? 3 : 2;
  static constexpr int64_t kMaxChunkLength = int64_t(1) << 30;  // positions in a piece fit an int
};

// A batch of kUnroll positions of a columns-pass thread's kRows rows, loaded before any is
// used (their loads in flight together). kRows == 1: the row's values through the problem (any
// layout, a mask per row). kRows > 1: rows that lie side by side in words (ReduceProblem::
// rows_in_words, checked by the host), one wide load a position and one mask element for them
// all, held as stored so that a half-precision element is converted only when folded.
template <class P, int kRows, int kUnroll>
struct ColumnBatch {
  using M = typename P::Monoid;
  using Value = typename P::Value;
  using In = typename P::Input;
  static constexpr bool kWords = kRows > 1;
  static constexpr int kCount = kUnroll;
  Value values[kWords ? 1 : kUnroll];
  In raw[kWords ? kUnroll : 1][kRows];
  bool kept[kWords ? kUnroll : 1];

  __device__ __forceinline__ void load(const P& problem, const typename P::Cursor& first, int64_t base,
                                       int64_t end) {
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      if constexpr (!kWords) {
        values[k] = base + k < end ? problem.load(first, base + k) : M::identity();
      } else {
        kept[k] = base + k < end && problem.kept(first, base + k);
        if (base + k < end && !load_wide<kRows>(problem.address(first, base + k), raw[k])) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) raw[k][r] = problem.address(first, base + k)[r];
        }
      }
    }
  }
  // Position base + k of row first + r (the identity past the end and where the mask drops it).
  __device__ __forceinline__ Value value(const P& problem, int k, int r) const {
    if constexpr (!kWords) {
      return values[k];
    } else {
      return kept[k] ? problem.element(raw[k][r]) : M::identity();
    }
  }
};

// The fold of one columns-pass piece (kRows rows that share their segments) along its positions,
// a run of one segment at a time: inside a run a position costs its combines and one test
// (is this where the run stops?); where it stops, the run's value is written (whole when its
// segment started in this piece, else as the piece's head) and the next segment's run begins;
// the piece's last run leaves the tail (or the head, when one segment covers the whole piece).
template <class P, int kRows>
struct ColumnRuns {
  using M = typename P::Monoid;
  using Value = typename P::Value;
  const P& problem;
  const ScanGeometry& g;
  const PiecePartials<Value>& parts;
  int64_t first_row;
  int64_t chunk;
  int64_t out_row;     // problem.final_row(first_row): the rows' outputs, found once
  int64_t begin;       // the piece's first position
  int length;          // its positions
  int64_t segment;     // the segment being folded
  int64_t next_start;  // the start of the one after it
  int stop;            // where its run stops, relative to begin (its end, or length)
  bool started_here;   // whether it started inside this piece
  Value acc[kRows];

  // The segment holding the piece's first position (first_segment, written before the pass).
  __device__ __forceinline__ void enter(const PieceSegments& segments) {
    segment = segments.lo(chunk);
    started_here = g.segment_start(segment) == begin;
    next_start = g.segment_start(segment + 1);
    begin_run(0);
  }

  // Folds the values of positions base, base + 1, ... (relative), Batch::kCount of them, ending
  // the runs that stop among them; positions past the piece hold the identity. One place ends
  // runs (not one per position of the batch): the code stays small and its registers few.
  template <class Batch>
  __device__ __forceinline__ void fold(const Batch& batch, int base) {
    int from = 0;
    while (stop < base + Batch::kCount && stop < length) {
      fold_range(batch, from, stop - base);
      from = stop - base;
      end_run(stop);
    }
    fold_range(batch, from, Batch::kCount);
  }

  // After the last position: the run that reaches the piece's end.
  __device__ __forceinline__ void finish() {
    if (started_here && next_start == begin + length) {  // ends with the piece
#pragma unroll
      for (int r = 0; r < kRows; ++r) store_final(r);
      return;
    }
    Value* partial = started_here ? parts.tail : parts.head;
#pragma unroll
    for (int r = 0; r < kRows; ++r) partial[parts.at(first_row + r, chunk)] = acc[r];
  }

 private:
  __device__ __forceinline__ void store_final(int r) const {
    problem.store_final_in_row(out_row + r * problem.final_row_step(), segment, acc[r]);
  }
  template <class Batch>
  __device__ __forceinline__ void fold_range(const Batch& batch, int from, int to) {
#pragma unroll
    for (int k = 0; k < Batch::kCount; ++k) {
      if (k >= from && k < to) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] = M::combine(acc[r], batch.value(problem, k, r));
      }
    }
  }
  __device__ __forceinline__ void begin_run(int pos) {
    // Clamped, so that invalid (unsorted) offsets cannot stall the walk or end it early.
    stop = static_cast<int>(max(int64_t{pos} + 1, min(next_start - begin, int64_t{length})));
#pragma unroll
    for (int r = 0; r < kRows; ++r) acc[r] = M::identity();
  }
  // The segment ended before `pos` (relative, < length): its value, then the segment holding pos
  // (empty segments skipped).
  __device__ __forceinline__ void end_run(int pos) {
    if (started_here) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) store_final(r);
    } else {
#pragma unroll
      for (int r = 0; r < kRows; ++r) parts.head[parts.at(first_row + r, chunk)] = acc[r];
    }
    // Never past the last segment, whatever the offsets say (their results are then wrong).
    const int64_t last = g.num_segments() - 1;
    const int64_t at = begin + pos;
    while (segment < last) {
      ++segment;
      next_start = g.segment_start(segment + 1);
      if (next_start > at) break;
    }
    started_here = true;
    begin_run(pos);
  }
};

// The columns pass: a thread walks a chunk of kRows neighbouring rows (one row in any layout;
// kRows > 1: rows in words, see ColumnBatch), and neighbouring threads take neighbouring
// groups of rows of the same chunk, so that every load is coalesced and segment boundaries
// are the same across the threads of a chunk. Two batches of positions are in flight: the next
// one's loads are issued before the current one is folded, and the first two before the
// segment's offsets are read.
template <class P, int kRows>
__global__ void __launch_bounds__(SegmentColumnsPolicy<P>::kThreads, SegmentColumnsPolicy<P>::kMinBlocksPerSM)
    segment_reduce_columns_kernel(const P problem, const ScanGeometry g, const PiecePartials<typename P::Value> parts,
                                  const PieceSegments segments, int64_t chunks) {
  if (chunks > 1) allow_dependent_launch();  // the fix-up follows (see allow_dependent_launch)
  // Positions a batch: 4 when a position is a 16-byte word, else 8.
  constexpr int kWordBytes = kRows * static_cast<int>(sizeof(typename P::Input));
  constexpr int kUnroll = kWordBytes >= 16 ? 4 : 8;
  using Batch = ColumnBatch<P, kRows, kUnroll>;
  const int64_t groups = g.rows / kRows;  // kRows divides the rows (rows_in_words)
  const int64_t pieces = groups * chunks;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t piece = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; piece < pieces; piece += stride) {
    const int64_t chunk = piece / groups;  // groups fastest: neighbouring threads, neighbouring rows
    const int64_t first_row = (piece - chunk * groups) * kRows;
    const int64_t begin = chunk * parts.chunk_length;
    const int64_t end = min(begin + parts.chunk_length, g.len);
    const int length = static_cast<int>(end - begin);
    const auto first = problem.cursor(first_row);
    Batch a, b;
    a.load(problem, first, begin, end);
    b.load(problem, first, begin + kUnroll, end);
    ColumnRuns<P, kRows> runs{problem, g, parts, first_row, chunk, problem.final_row(first_row), begin, length};
    runs.enter(segments);
    for (int base = 0; base < length; base += 2 * kUnroll) {
      runs.fold(a, base);
      if (base + 2 * kUnroll < length) a.load(problem, first, begin + base + 2 * kUnroll, end);
      if (base + kUnroll < length) runs.fold(b, base + kUnroll);
      if (base + 3 * kUnroll < length) b.load(problem, first, begin + base + 3 * kUnroll, end);
    }
    runs.finish();
  }
}

// The engine that `run_reduce` (host/reduce_dispatch.h) drives on CUDA: picks the pass by
// layout, then the fix-up when a row has more than one piece.
struct SegmentReduceEngine {
  static constexpr bool kIsCuda = true;  // selects the accumulate type (host/scan_dispatch.h)
  LaunchContext ctx;                     // the caller's device is current
  // Grids stop growing here: every kernel of the engine loops over what is left.
  static constexpr int64_t kMaxBlocks = int64_t(1) << 20;

  // Positions per thread of the columns pass, whose threads take `rows_per_thread` rows each:
  // the pieces fill the resident threads twice (a whole number of waves, give or take the
  // rounding, where a fixed count of threads left most of the GPU idle in a last part-wave), and
  // are at least 16 positions long, so that the fix-up stays small.
  template <class P>
  int64_t column_chunk_length(const ScanGeometry& g, int rows_per_thread) const {
    using Policy = SegmentColumnsPolicy<P>;
    constexpr int64_t kWaves = 2;
    const int64_t resident = int64_t{ctx.sm_count} * Policy::kMinBlocksPerSM * Policy::kThreads;
    const int64_t groups = g.rows / rows_per_thread;
    const int64_t per_thread = (groups * g.len + kWaves * resident - 1) / (kWaves * resident);
    return std::min(std::max<int64_t>(16, per_thread), Policy::kMaxChunkLength);
  }
  // Rows of the columns pass that a thread reads a word of at a time (ReduceProblem::rows_in_words).
  static constexpr int kColumnWordRows = 4;

  // The tile of the rows pass: a block's (kThreads x kItems positions) for rows of at least half
  // of that (at least half of a block's threads have values), else a warp's (32 x kItems).
  template <class Value>
  static int tile_threads(const ScanGeometry& g) {
    using Policy = SegmentReducePolicy<Value>;
    return 2 * g.len >= int64_t{Policy::kThreads} * Policy::kItems ? Policy::kThreads : 32;
  }

  // The fix-up of the segments that cross pieces, a dependent launch of the pass before it.
  // segments_from_pass: first_segment is written by the pass itself (the stream pass).
  template <class P>
  void launch_fixup(const P& problem, const ScanGeometry& g, const PiecePartials<typename P::Value>& parts,
                    const PieceSegments& segments, int64_t chunks, bool segments_from_pass) const {
    const int64_t items = g.rows * fixup_edges(segments, chunks);
    const auto blocks = static_cast<unsigned>(std::min<int64_t>((items + 255) / 256, kMaxBlocks));
    launch_after(segment_reduce_fixup_kernel<P>, blocks, 256, ctx, problem, g, parts, segments, chunks,
                 segments_from_pass);
  }

  // Rows whose sequences are this long on average (positions) take the stream pass, unless the
  // combine is costly: the stream pass inlines its fold many times over (two rounds in flight,
  // the fast and the split fold), which for logsumexp's exp and log1p cost registers and
  // instruction cache (1.04 ms against the tile pass's 0.29 on the random-length row).
  static constexpr int64_t kStreamPassMinAverage = 128;
  template <class M>
  static bool takes_stream_pass(const ScanGeometry& g, bool columns) {
    return !kCostlyCombine<M> && !columns && g.segments.offsets != nullptr &&
           g.len >= kStreamPassMinAverage * g.num_segments();
  }

  // segment_reduce_stream.cuh: a warp streams each piece of about one resident warp's share of
  // the input, then the fix-up of the sequences that cross pieces.
  template <class P>
  void run_stream_pass(const P& problem, const ScanGeometry& g) const {
    using Value = typename P::Value;
    using Policy = SegmentStreamPolicy;
    const int64_t resident_warps = int64_t{ctx.sm_count} * Policy::kMinBlocksPerSM * (Policy::kThreads / 32);
    const int64_t share = (g.rows * g.len + resident_warps - 1) / resident_warps;
    const int64_t quanta = std::max((share + Policy::kPieceQuantum - 1) / Policy::kPieceQuantum, Policy::kMinQuantaPerPiece);
    const int64_t piece_length = std::min(quanta * Policy::kPieceQuantum, Policy::kMaxPieceLength);
    const int64_t pieces = (g.len + piece_length - 1) / piece_length;
    PiecePartials<Value> parts;
    parts.head = static_cast<Value*>(ctx.workspace->allocate(2 * g.rows * pieces * sizeof(Value)));
    parts.tail = parts.head + g.rows * pieces;
    parts.row_step = pieces;
    parts.chunk_step = 1;
    parts.chunk_length = piece_length;
    // The segment holding each piece's first position, as the piece's warp finds it (for the fix-up).
    auto* first_segment = static_cast<int64_t*>(ctx.workspace->allocate(pieces * sizeof(int64_t)));
    constexpr int64_t kWarpsPerBlock = Policy::kThreads / 32;
    const int64_t blocks = std::min<int64_t>((g.rows * pieces + kWarpsPerBlock - 1) / kWarpsPerBlock, kMaxBlocks);
    // Words of 16 bytes hold whole elements of every type that reductions read.
    static_assert(16 % sizeof(typename P::Input) == 0, "segment reduction: an element size that does not divide 16");
    const auto launch = [&](auto kernel) {
      launch_after(kernel, static_cast<unsigned>(blocks), Policy::kThreads, ctx, problem, g, parts,
                   first_segment, pieces, piece_length);
    };
    if (problem.rows_contiguous() && !wide_access_disabled()) {
      launch(segment_reduce_stream_kernel<P, PiecePartials<Value>, true>);
    } else {
      launch(segment_reduce_stream_kernel<P, PiecePartials<Value>, false>);
    }
    if (pieces > 1) launch_fixup(problem, g, parts, PieceSegments{first_segment, g.num_segments() - 1}, pieces, true);
  }

  template <class P>
  void operator()(const P& problem, const ScanGeometry& g, const ScanLayout& layout) const {
    using Value = typename P::Value;
    TORCH_INTERNAL_ASSERT(!g.reverse && !g.exclusive, "segment reductions run forward and inclusive");
    if (g.rows == 0 || g.len == 0) return;
    const cudaStream_t stream = ctx.stream;
    const bool columns = layout.rows_adjacent && g.rows > 1;
    if (takes_stream_pass<typename P::Monoid>(g, columns)) return run_stream_pass(problem, g);
    using Policy = SegmentReducePolicy<Value>;
    const int row_tile_threads = tile_threads<Value>(g);
    // Rows in words for floating elements of up to 4 bytes (features, embeddings): words of wider
    // ones (and their folds) hold more registers than the kernel has without spilling, and
    // integer inputs keep one kernel (build time).
    using In = typename P::Input;
    constexpr bool kWordsFit = sizeof(In) <= 4 && !std::is_integral_v<In>;
    bool column_words = false;
    if constexpr (kWordsFit) {
      column_words = columns && !wide_access_disabled() && problem.template rows_in_words<kColumnWordRows>();
    }
    const int64_t chunk_length = columns ? column_chunk_length<P>(g, column_words ? kColumnWordRows : 1)
                                         : int64_t{row_tile_threads} * Policy::kItems;
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
    if (columns) {
      parts.row_step = 1;
      parts.chunk_step = g.rows;
      const int64_t threads = column_words ? pieces / kColumnWordRows : pieces;
      constexpr int kThreads = SegmentColumnsPolicy<P>::kThreads;
      const auto blocks = static_cast<unsigned>(std::min<int64_t>((threads + kThreads - 1) / kThreads, kMaxBlocks));
      const auto launch = [&](auto kernel) { kernel<<<blocks, kThreads, 0, stream>>>(problem, g, parts, segments, chunks); };
      if constexpr (kWordsFit) {
        if (column_words) launch(segment_reduce_columns_kernel<P, kColumnWordRows>);
        else launch(segment_reduce_columns_kernel<P, 1>);
      } else {
        launch(segment_reduce_columns_kernel<P, 1>);
      }
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
    if (chunks > 1) launch_fixup(problem, g, parts, segments, chunks, false);
  }
};

}  // namespace parprims::cuda
