// The CPU scan engine.
//
// One loop scans every stretch of a row that lies inside one segment (`stretch`): rows, packed
// sequences (a stretch per sequence), exclusive and reverse scans share it. Many rows: rows in
// parallel, each sequential, four rows interleaved position by position (sequence by sequence:
// every row has the same packed sequences), so that four independent chains of combines fill
// each other's latency. Fewer rows than four per thread: the three-phase chunked scan (reduce
// each chunk, scan the chunk totals, rescan each chunk from its carry-in) over
// at::parallel_for, span by span, four chunks of a row interleaved per task. Reductions, which
// write no per-element output, skip the scan: each segment is folded plainly (`reduce`).
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../core/scan_problems.h"
#include "lane_sums.h"
#include "vector_exp.h"

namespace parprims::cpu {

// The piece of a long row that one task scans in the three-phase scan (rows up to twice this
// are never split), and the work of one task when rows are scanned in parallel.
constexpr int64_t kRowChunk = 1 << 15;
// The stretch of a long row whose chunks are scanned together (both passes while it is in cache).
constexpr int64_t kSpan = 1 << 20;

// The chunks of a span [begin, begin + len) of a long row: about kRowChunk positions each, a
// multiple of `multiple` of them, lengths differing by at most one. Chunk c is [at(c), at(c + 1)).
struct ChunkBounds {
  int64_t begin, count, quotient, remainder;
  ChunkBounds(int64_t begin_, int64_t len, int64_t multiple) : begin(begin_) {
    count = ((len + kRowChunk - 1) / kRowChunk + multiple - 1) / multiple * multiple;
    quotient = len / count;
    remainder = len % count;
  }
  int64_t at(int64_t c) const { return begin + c * quotient + c * remainder / count; }
};

template <class P>
struct RowScanner {
  using M = typename P::Monoid;
  using Value = typename M::value_type;
  using Seg = Segmented<M>;
  using Lifted = typename Seg::value_type;
  using Cursor = typename P::Cursor;

  const P& problem;
  const ScanGeometry& g;

  // Logical positions [begin, end) (begin < end) of one segment of `row` (physical segment
  // `segment`), one combine after another from `acc`; `head`: begin starts the segment, whose
  // first value replaces `acc`. Writes the outputs when kWrite; returns the inclusive value at
  // end - 1. Every path of the engine scans through this loop or its interleaved form.
  template <bool kWrite>
  Value stretch(const Cursor& cursor, int64_t row, int64_t begin, int64_t end, Value acc, bool head,
                int64_t segment) const {
    const int64_t step = g.reverse ? -1 : 1;
    int64_t ppos = g.physical_pos(begin);
    int64_t pos = begin;
    if (head) {
      const auto v = problem.at_head(problem.load(cursor, ppos), row, segment);
      if constexpr (kWrite) problem.store(cursor, ppos, g.exclusive ? problem.exclusive_head(row, segment) : v);
      acc = v;
      ++pos;
      ppos += step;
    }
    if constexpr (!kWrite) {
      for (; pos < end; ++pos, ppos += step) acc = M::combine(acc, problem.load(cursor, ppos));
    } else if (g.exclusive) {
      for (; pos < end; ++pos, ppos += step) {
        const auto v = problem.load(cursor, ppos);
        problem.store(cursor, ppos, acc);
        acc = M::combine(acc, v);
      }
    } else {
      for (; pos < end; ++pos, ppos += step) {
        acc = M::combine(acc, problem.load(cursor, ppos));
        problem.store(cursor, ppos, acc);
      }
    }
    return acc;
  }

  // Scans logical positions [begin, end) of `row` starting from `carry`; writes the outputs
  // when kWrite, and returns the lifted aggregate (carry included).
  template <bool kWrite>
  Lifted run(int64_t row, int64_t begin, int64_t end, Lifted carry) const {
    if (begin >= end) return carry;
    if (g.segments.offsets == nullptr) {  // only position 0 starts a segment
      const bool head = begin == 0;
      const Value acc = stretch<kWrite>(problem.cursor(row), row, begin, end, carry.value, head, 0);
      if (kWrite && end == g.len) problem.store_final(row, 0, acc);
      return {acc, carry.head || head};
    }
    // Packed sequences: a stretch per segment (or piece of one) inside [begin, end).
    const Cursor cursor = problem.cursor(row);
    SegmentWalker walker;
    walker.seek(g, begin);
    bool head = walker.starts_segment(g, begin);
    for (int64_t pos = begin; pos < end;) {
      const int64_t stop = std::min(walker.next_start, end);
      const int64_t segment = g.physical_segment(walker.segment);
      carry = {stretch<kWrite>(cursor, row, pos, stop, carry.value, head, segment), carry.head || head};
      if (kWrite && stop == walker.next_start) problem.store_final(row, segment, carry.value);
      pos = stop;
      if (pos < end) head = walker.enter(g, pos);  // pos is the next segment's start
    }
    return carry;
  }

  void whole_row(int64_t row) const { run<true>(row, 0, g.len, Seg::identity()); }

  // kInterleave stretches scanned position by position: each is a chain of dependent combines
  // (a float add waits for the previous one), and independent chains fill those waits. The
  // same combines in the same order as `stretch`. Either the same stretch of kInterleave rows
  // from `first` on, a whole segment of each (kOneRow false: one position, kInterleave
  // cursors), or kInterleave stretches of row `first` (kOneRow: one cursor, a position each).
  // begins[r]: the stretches' first positions, n >= 1 positions each, none crossing a
  // segment's end. heads: which stretches start a segment, and its physical index. carries:
  // the carries in (read only for stretches that start no segment), then each stretch's last
  // inclusive value.
  static constexpr int kInterleave = 4;
  struct Heads {
    bool starts[kInterleave];
    int64_t segment[kInterleave];
  };
  template <bool kOneRow>
  using Cursors = Cursor[kOneRow ? 1 : kInterleave];
  template <bool kWrite, bool kOneRow>
  void interleaved(const Cursors<kOneRow>& cursors, int64_t first, const int64_t (&begins)[kInterleave], int64_t n,
                   const Heads& heads, Value (&carries)[kInterleave]) const {
    if (kWrite && g.exclusive) {
      interleaved<kWrite, kOneRow, true>(cursors, first, begins, n, heads, carries);
    } else {
      interleaved<kWrite, kOneRow, false>(cursors, first, begins, n, heads, carries);
    }
  }
  template <bool kWrite, bool kOneRow, bool kExclusive>
  void interleaved(const Cursors<kOneRow>& cursors, int64_t first, const int64_t (&begins)[kInterleave], int64_t n,
                   const Heads& heads, Value (&carries)[kInterleave]) const {
    // Whole rows share one position, stretches of one row one cursor: fewer live registers.
    constexpr int kPositions = kOneRow ? kInterleave : 1;
    int64_t ppos[kPositions];
    Value acc[kInterleave];  // a local copy, which the compiler keeps in registers
    for (int r = 0; r < kPositions; ++r) ppos[r] = g.physical_pos(begins[r]);
    for (int r = 0; r < kInterleave; ++r) {
      const Cursor& c = cursors[kOneRow ? 0 : r];
      const int64_t p = ppos[kOneRow ? r : 0];
      if (kOneRow && !heads.starts[r]) {  // (a stretch of whole rows is a whole segment:
        acc[r] = carries[r];                // known here, the compiler keeps acc in registers)
        advance<kWrite, kExclusive>(c, p, acc[r]);
        continue;
      }
      const int64_t row = kOneRow ? first : first + r;
      const auto v = problem.at_head(problem.load(c, p), row, heads.segment[r]);
      if constexpr (kWrite) problem.store(c, p, kExclusive ? problem.exclusive_head(row, heads.segment[r]) : v);
      acc[r] = v;
    }
    const int64_t step = g.reverse ? -1 : 1;
    for (int64_t i = 1; i < n; ++i) {
      for (int r = 0; r < kPositions; ++r) ppos[r] += step;
      for (int r = 0; r < kInterleave; ++r) advance<kWrite, kExclusive>(cursors[kOneRow ? 0 : r], ppos[kOneRow ? r : 0], acc[r]);
    }
    for (int r = 0; r < kInterleave; ++r) carries[r] = acc[r];
  }

  // One position of a stretch: combine, and store the inclusive or exclusive output.
  template <bool kWrite, bool kExclusive>
  void advance(const Cursor& c, int64_t p, Value& acc) const {
    const auto v = problem.load(c, p);
    if constexpr (kExclusive) problem.store(c, p, acc);
    acc = M::combine(acc, v);
    if constexpr (kWrite && !kExclusive) problem.store(c, p, acc);
  }

  // Rows [lo, hi), whole: kInterleave at a time, segment by segment (every row has the same
  // packed sequences).
  void whole_rows(int64_t lo, int64_t hi) const {
    int64_t row = lo;
    for (; row + kInterleave <= hi; row += kInterleave) {
      Cursor cursors[kInterleave];
      for (int r = 0; r < kInterleave; ++r) cursors[r] = problem.cursor(row + r);
      for (int64_t k = 0; k < g.num_segments(); ++k) {
        const int64_t start = g.segment_start(k), stop = g.segment_start(k + 1);
        if (start == stop) continue;  // empty sequences: the host writes their final states
        const int64_t segment = g.physical_segment(k);
        int64_t begins[kInterleave];
        Heads heads;
        for (int r = 0; r < kInterleave; ++r) begins[r] = start, heads.starts[r] = true, heads.segment[r] = segment;
        Value acc[kInterleave];
        interleaved<true, false>(cursors, row, begins, stop - start, heads, acc);
        for (int r = 0; r < kInterleave; ++r) problem.store_final(row + r, segment, acc[r]);
      }
    }
    for (; row < hi; ++row) whole_row(row);
  }

  // kInterleave chunks [begins[r], ends[r]) of one row with packed sequences, interleaved where
  // each chunk is at a stretch of one sequence at least kShortStretch long: a lane at a shorter
  // one (a short sequence, a sequence's last positions) scans it alone first. lifted: the
  // carries in, then each chunk's lifted aggregate (carry included).
  static constexpr int64_t kShortStretch = 32;
  template <bool kWrite>
  void packed_chunks(int64_t row, const int64_t (&begins)[kInterleave], const int64_t (&ends)[kInterleave],
                     Lifted (&lifted)[kInterleave]) const {
    const Cursor cursor[1] = {problem.cursor(row)};
    SegmentWalker walkers[kInterleave];
    int64_t pos[kInterleave];
    Heads heads;
    auto enter_segment = [&](int r) {
      heads.starts[r] = walkers[r].starts_segment(g, pos[r]);
      heads.segment[r] = g.physical_segment(walkers[r].segment);
    };
    for (int r = 0; r < kInterleave; ++r) {
      walkers[r].seek(g, begins[r]);
      pos[r] = begins[r];
      enter_segment(r);
    }
    auto stretch_end = [&](int r) { return std::min(walkers[r].next_start, ends[r]); };
    // Lane r has scanned up to pos[r]: at its sequence's end, store the final state, move on.
    auto scanned_to = [&](int r, const Value& acc, int64_t to) {
      lifted[r] = {acc, lifted[r].head || heads.starts[r]};
      pos[r] = to;
      heads.starts[r] = false;
      if (pos[r] != walkers[r].next_start) return;
      if (kWrite) problem.store_final(row, heads.segment[r], acc);
      if (pos[r] == ends[r]) return;
      walkers[r].enter(g, pos[r]);
      enter_segment(r);
    };
    for (;;) {
      int64_t n = std::numeric_limits<int64_t>::max();
      bool lane_done = false;
      for (int r = 0; r < kInterleave; ++r) {
        while (pos[r] < ends[r] && stretch_end(r) - pos[r] < kShortStretch) {
          const int64_t stop = stretch_end(r);
          scanned_to(r, stretch<kWrite>(cursor[0], row, pos[r], stop, lifted[r].value, heads.starts[r], heads.segment[r]), stop);
        }
        if (pos[r] == ends[r]) lane_done = true;
        n = std::min(n, stretch_end(r) - pos[r]);
      }
      if (lane_done) break;
      Value acc[kInterleave];
      for (int r = 0; r < kInterleave; ++r) acc[r] = lifted[r].value;
      interleaved<kWrite, true>(cursor, row, pos, n, heads, acc);
      for (int r = 0; r < kInterleave; ++r) scanned_to(r, acc[r], pos[r] + n);
    }
    for (int r = 0; r < kInterleave; ++r) {
      if (pos[r] < ends[r]) lifted[r] = run<kWrite>(row, pos[r], ends[r], lifted[r]);
    }
  }

  // One long row, span by span (a span's two passes then find it in cache), each span in three
  // phases: the aggregate of each chunk (in parallel), a scan of the chunk aggregates from the
  // span's carry-in, each chunk rescanned from its carry-in (in parallel). A task takes
  // kInterleave neighbouring chunks and scans them interleaved (with packed sequences, wherever
  // each chunk is inside a long enough stretch of one sequence), so that one thread runs
  // kInterleave independent chains: two passes then take less time than one chain through the
  // span, even on one thread.
  void chunked_row(int64_t row) const {
    Lifted carry = Seg::identity();
    for (int64_t begin = 0; begin < g.len; begin += kSpan) carry = chunked_span(row, begin, std::min(g.len, begin + kSpan), carry);
  }

  Lifted chunked_span(int64_t row, int64_t begin, int64_t end, Lifted carry) const {
    const ChunkBounds bounds(begin, end - begin, kInterleave);
    const int64_t chunks = bounds.count, quotient = bounds.quotient;
    auto bound = [&](int64_t c) { return bounds.at(c); };
    std::vector<Lifted> carries(chunks + 1, Seg::identity());
    auto chunk_group = [&](int64_t group, auto write) {
      constexpr bool kWrite = decltype(write)::value;
      const int64_t c0 = group * kInterleave;
      if (quotient == 0) {  // (rows shorter than the chunk count: only from tests)
        for (int64_t c = c0; c < c0 + kInterleave; ++c) {
          const Lifted out = run<kWrite>(row, bound(c), bound(c + 1), kWrite ? carries[c] : Seg::identity());
          if constexpr (!kWrite) carries[c + 1] = out;
        }
        return;
      }
      int64_t begins[kInterleave];
      for (int r = 0; r < kInterleave; ++r) begins[r] = bound(c0 + r);
      if (g.segments.offsets != nullptr) {
        int64_t ends[kInterleave];
        Lifted lifted[kInterleave];
        for (int r = 0; r < kInterleave; ++r) {
          ends[r] = bound(c0 + r + 1);
          lifted[r] = kWrite ? carries[c0 + r] : Seg::identity();
        }
        packed_chunks<kWrite>(row, begins, ends, lifted);
        if constexpr (!kWrite) std::copy(lifted, lifted + kInterleave, carries.begin() + c0 + 1);
        return;
      }
      Value acc[kInterleave];
      Heads heads;
      for (int r = 0; r < kInterleave; ++r) {
        acc[r] = kWrite ? carries[c0 + r].value : M::identity();
        heads.starts[r] = begins[r] == 0;
        heads.segment[r] = 0;
      }
      const Cursor cursor[1] = {problem.cursor(row)};
      interleaved<kWrite, true>(cursor, row, begins, quotient, heads, acc);  // the chunks' common length
      for (int r = 0; r < kInterleave; ++r) {
        const int64_t stop = bound(c0 + r + 1);
        if (begins[r] + quotient < stop) acc[r] = stretch<kWrite>(cursor[0], row, begins[r] + quotient, stop, acc[r], false, 0);
        if (!kWrite) carries[c0 + r + 1] = {acc[r], begins[r] == 0};
        if (kWrite && stop == g.len) problem.store_final(row, 0, acc[r]);
      }
    };
    const int64_t groups = chunks / kInterleave;
    at::parallel_for(0, groups, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) chunk_group(k, std::false_type{});
    });
    carries[0] = carry;
    for (int64_t c = 1; c <= chunks; ++c) carries[c] = Seg::combine(carries[c - 1], carries[c]);
    at::parallel_for(0, groups, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) chunk_group(k, std::true_type{});
    });
    return carries[chunks];
  }
};

// Reductions (`kReductionOnly`: only segment totals are written) need no scan. A row is cut
// into pieces of kRowChunk positions, all pieces of all rows in parallel; a piece folds each
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
  int64_t chunks;  // pieces per row

  // Piece `chunk` of rows row0 .. row0 + kRows - 1; parts[r] receives row0 + r's crossing parts.
  template <int kRows>
  void pieces(int64_t row0, int64_t chunk, Parts (&parts)[kRows]) const {
    const int64_t begin = chunk * kRowChunk;
    const int64_t end = std::min(g.len, begin + kRowChunk);
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

template <class P>
void reduce(const P& problem, const ScanGeometry& g) {
  using R = PieceReducer<P>;
  const R reducer{problem, g, (g.len + kRowChunk - 1) / kRowChunk};
  const int64_t chunks = reducer.chunks;
  // Work items: (group of kGroup rows, piece), then (one of the rows left over, piece).
  const int64_t groups = g.rows / R::kGroup;
  const int64_t grouped_items = groups * chunks;
  const int64_t items = grouped_items + (g.rows - groups * R::kGroup) * chunks;
  // Crossing parts by (row, piece); none when every row is one piece.
  std::vector<typename R::Parts> parts(chunks > 1 ? static_cast<size_t>(g.rows * chunks) : 0);
  auto keep = [&](int64_t row, int64_t chunk, const typename R::Parts& p) {
    if (chunks > 1) parts[row * chunks + chunk] = p;
  };
  const int64_t grain = std::max<int64_t>(1, kRowChunk / (std::min(g.len, kRowChunk) * R::kGroup));
  at::parallel_for(0, items, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      if (k < grouped_items) {
        const int64_t row0 = k / chunks * R::kGroup, chunk = k % chunks;
        typename R::Parts group_parts[R::kGroup];
        reducer.template pieces<R::kGroup>(row0, chunk, group_parts);
        for (int r = 0; r < R::kGroup; ++r) keep(row0 + r, chunk, group_parts[r]);
      } else {
        const int64_t row = groups * R::kGroup + (k - grouped_items) / chunks, chunk = (k - grouped_items) % chunks;
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

template <class P>
void scan(const P& problem, const ScanGeometry& g) {
  if (g.rows == 0 || g.len == 0) return;
  if constexpr (P::kReductionOnly) {
    reduce(problem, g);
    return;
  }
  const RowScanner<P> scanner{problem, g};
  // Too few rows to give every thread kInterleave of them: cut each row into chunks instead.
  const int64_t threads = at::get_num_threads();
  if (g.len > 2 * kRowChunk && g.rows < threads * RowScanner<P>::kInterleave) {
    for (int64_t row = 0; row < g.rows; ++row) scanner.chunked_row(row);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kRowChunk / g.len);
  at::parallel_for(0, g.rows, grain, [&](int64_t lo, int64_t hi) { scanner.whole_rows(lo, hi); });
}

}  // namespace parprims::cpu
