// The CPU engine of reductions: problems with `kReductionOnly` (only segment totals are
// written) are folded segment by segment, never scanned. `scan` in engine.h sends them here.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "../core/scan_problems.h"
#include "lane_sums.h"
#include "row_pieces.h"
#include "vector_exp.h"

namespace parprims::cpu {

// Reductions (`kReductionOnly`: only segment totals are written) need no scan. A row is cut
// into pieces (reduce_chunk_length), all pieces of all rows in parallel; a piece folds each
// segment's positions inside it in a plain loop, writes the segments that start and end in it,
// and keeps the parts of the segments that cross its edges, which a pass over each row's
// pieces then combines in order. The combines happen in the same order on every run. Rows go
// kGroup at a time, position by position (the segments are the same in every row): neighbouring
// rows of a strided layout share cache lines, and independent rows fill each fold's latency.
template <class P>
struct PieceReducer {
  using M = typename P::Monoid;
  using Value = typename M::value_type;
  static constexpr int kGroup = 8;
  // The part of a segment that crosses a piece's edge (segment -1: none).
  struct Part {
    int64_t segment = -1;
    Value value = M::identity();
    bool ends = false;  // a head part: its segment ends inside the piece
  };
  struct Parts {
    Part head;  // the segment holding the piece's first position, started before the piece
    Part tail;  // a segment that starts in the piece and goes on after it
  };

  const P& problem;
  const ScanGeometry& g;
  int64_t chunk_length;  // positions per piece
  int64_t chunks;        // pieces per row

  // Piece `chunk` of rows row0 .. row0 + kRows - 1; parts[r] receives row0 + r's crossing parts.
  template <int kRows>
  void pieces(int64_t row0, int64_t chunk, Parts (&parts)[kRows]) const {
    const int64_t begin = chunk * chunk_length;
    const int64_t end = std::min(g.len, begin + chunk_length);
    typename P::Cursor cursors[kRows];
    for (int r = 0; r < kRows; ++r) cursors[r] = problem.cursor(row0 + r);
    const bool side_by_side = kRows > 1 && problem.side_by_side(cursors);
    SegmentWalker walker;
    walker.seek(g, begin);
    for (int64_t pos = begin; pos < end;) {
      const int64_t segment = walker.segment;
      const int64_t start = g.segment_start(segment);
      const int64_t stop = walker.next_start;  // the segment's end (empty ones are skipped)
      const int64_t last = std::min(stop, end);
      Value acc[kRows];
      if constexpr (kRows == 1 && kIsLogSumExp) {
        acc[0] = log_sum_exp(cursors[0], pos, last);
      } else if (side_by_side) {
        fold_side_by_side(cursors[0], pos, last, acc);
      } else {
        for (int r = 0; r < kRows; ++r) acc[r] = problem.load(cursors[r], g.physical_pos(pos));
        for (int64_t p = pos + 1; p < last; ++p) {
          const int64_t physical_p = g.physical_pos(p);
          for (int r = 0; r < kRows; ++r) acc[r] = M::combine(acc[r], problem.load(cursors[r], physical_p));
        }
      }
      const int64_t physical = g.physical_segment(segment);
      for (int r = 0; r < kRows; ++r) {
        if (start < begin) {
          parts[r].head = {physical, acc[r], stop <= end};
        } else if (stop > end) {
          parts[r].tail = {physical, acc[r], false};
        } else {
          problem.store_final(row0 + r, physical, acc[r]);
        }
      }
      pos = last;
      if (pos < end) walker.enter(g, pos);
    }
  }

  static constexpr bool kIsLogSumExp =
      std::is_same_v<M, LogAddExp<float>> || std::is_same_v<M, LogAddExp<double>>;
  static constexpr bool kIsMean = std::is_same_v<M, SumCount<float>> || std::is_same_v<M, SumCount<double>>;

  // Rows side by side (PieceReducer::pieces): the fold of positions [from, to) of kRows rows,
  // reading each position's kRows elements together (sum, prod: a loop the compiler
  // vectorizes). A mean's rows share their mask, so they share their count: the sums alone are
  // kept, in vector lanes (lane_sums.h), and a masked-out position is skipped as a whole (the
  // (sum, count) pairs, and plain arrays of sums, stayed scalar code: 2-4x the sum's time).
  template <int kRows>
  void fold_side_by_side(const typename P::Cursor& first, int64_t from, int64_t to, Value (&acc)[kRows]) const {
    if constexpr (kIsMean) {
      LaneSums<decltype(Value::sum), kRows> sums;
      int64_t count = 0;
      for (int64_t p = from; p < to; ++p) {
        if (const auto* x = problem.kept_side_by_side(first, g.physical_pos(p))) {
          sums.add(x);
          ++count;
        }
      }
      for (int r = 0; r < kRows; ++r) acc[r] = {sums[r], count};
    } else {
      problem.load_side_by_side(first, g.physical_pos(from), acc);
      for (int64_t p = from + 1; p < to; ++p) {
        Value v[kRows];
        problem.load_side_by_side(first, g.physical_pos(p), v);
        for (int r = 0; r < kRows; ++r) acc[r] = M::combine(acc[r], v[r]);
      }
    }
  }

  // The log-sum-exp of one row's positions [from, to) (at most a piece), in two passes over
  // the values kept in a buffer: their maximum m, then m + log(sum of exp(x - m)): one exp per
  // element (vectorized in float, exp4 of vector_exp.h) where the monoid's combine takes an exp
  // and a log1p. A NaN gives NaN, and a maximum of -inf (nothing but -inf) or +inf gives itself,
  // as the combine does.
  Value log_sum_exp(const typename P::Cursor& cursor, int64_t from, int64_t to) const {
    thread_local std::vector<Value> values;
    const int64_t n = to - from;
    values.resize(static_cast<size_t>(n));
    Value top = -std::numeric_limits<Value>::infinity();
    bool nan = false;
    for (int64_t i = 0; i < n; ++i) {
      const Value x = problem.load(cursor, g.physical_pos(from + i));
      values[i] = x;
      nan |= x != x;
      top = x > top ? x : top;
    }
    if (nan) return std::numeric_limits<Value>::quiet_NaN();
    if (std::isinf(top)) return top;
    for (int64_t i = 0; i < n; ++i) values[i] -= top;
    exp_in_place(values.data(), n);
    Value sums[4] = {};  // four partial sums: independent adds, and fewer rounding steps
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      for (int k = 0; k < 4; ++k) sums[k] += values[i + k];
    }
    for (; i < n; ++i) sums[0] += values[i];
    return top + std::log((sums[0] + sums[1]) + (sums[2] + sums[3]));
  }

  // The segments that cross the row's pieces, combined in order.
  void join(int64_t row, const Parts* parts) const {
    Value acc = M::identity();
    for (int64_t c = 0; c < chunks; ++c) {
      const Part& head = parts[c].head;
      if (head.segment >= 0) {
        acc = M::combine(acc, head.value);
        if (head.ends) problem.store_final(row, head.segment, acc);
      }
      if (parts[c].tail.segment >= 0) acc = parts[c].tail.value;
    }
  }
};

// Positions per piece of a reduction: kRowChunk, except where the groups of rows lie side by side
// (a position's elements of neighbouring groups share cache lines: the features of a (T, F)
// tensor reduced along T). A group's walk over a piece touches a cache line a position, and the
// groups that share those lines fold the same piece one after the other (pieces go chunk by
// chunk); pieces of kSideBySideChunk positions (128 KB of lines) let the later groups find them
// in cache. With kRowChunk pieces, each group of a (2^14, 64) float32 input read the whole input
// from memory again (half of its sum's time went to those loads). 1024 to 4096 positions
// measured alike on a 1 MB L2; 256 made masked pooling's pieces too small.
constexpr int64_t kSideBySideChunk = 2048;

template <class R, class P>
int64_t reduce_chunk_length(const P& problem, const ScanGeometry& g) {
  if (g.rows < 2 * R::kGroup) return kRowChunk;
  typename P::Cursor first[R::kGroup], second[R::kGroup];
  for (int r = 0; r < R::kGroup; ++r) {
    first[r] = problem.cursor(r);
    second[r] = problem.cursor(R::kGroup + r);
  }
  const bool shared_lines =
      problem.side_by_side(first) && problem.side_by_side(second) && second[0].in == first[0].in + R::kGroup;
  return shared_lines ? kSideBySideChunk : kRowChunk;
}

template <class P>
void reduce(const P& problem, const ScanGeometry& g) {
  using R = PieceReducer<P>;
  const int64_t chunk_length = reduce_chunk_length<R>(problem, g);
  const R reducer{problem, g, chunk_length, (g.len + chunk_length - 1) / chunk_length};
  const int64_t chunks = reducer.chunks;
  // Work items, piece by piece (a piece's groups one after the other, in one thread's range):
  // (piece, group of kGroup rows), then (piece, one of the rows left over).
  const int64_t groups = g.rows / R::kGroup;
  const int64_t grouped_items = groups * chunks;
  const int64_t items = grouped_items + (g.rows - groups * R::kGroup) * chunks;
  // Crossing parts by (row, piece); none when every row is one piece.
  std::vector<typename R::Parts> parts(chunks > 1 ? static_cast<size_t>(g.rows * chunks) : 0);
  auto keep = [&](int64_t row, int64_t chunk, const typename R::Parts& p) {
    if (chunks > 1) parts[row * chunks + chunk] = p;
  };
  const int64_t grain = std::max<int64_t>(1, kRowChunk / (std::min(g.len, chunk_length) * R::kGroup));
  const int64_t ungrouped = g.rows - groups * R::kGroup;
  at::parallel_for(0, items, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      if (k < grouped_items) {
        const int64_t chunk = k / groups, row0 = k % groups * R::kGroup;
        typename R::Parts group_parts[R::kGroup];
        reducer.template pieces<R::kGroup>(row0, chunk, group_parts);
        for (int r = 0; r < R::kGroup; ++r) keep(row0 + r, chunk, group_parts[r]);
      } else {
        const int64_t chunk = (k - grouped_items) / ungrouped;
        const int64_t row = groups * R::kGroup + (k - grouped_items) % ungrouped;
        typename R::Parts row_parts[1];
        reducer.template pieces<1>(row, chunk, row_parts);
        keep(row, chunk, row_parts[0]);
      }
    }
  });
  if (chunks == 1) return;  // no segment crosses a piece
  at::parallel_for(0, g.rows, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) reducer.join(row, parts.data() + row * chunks);
  });
}

}  // namespace parprims::cpu
