// The CPU scan engine.
//
// One loop scans every stretch of a row that lies inside one segment (`stretch`): rows, packed
// sequences (a stretch per sequence), exclusive and reverse scans share it. Many rows: rows in
// parallel, each sequential, four rows interleaved position by position (sequence by sequence:
// every row has the same packed sequences), so that four independent chains of combines fill
// each other's latency. Fewer rows than four per thread: the three-phase chunked scan (reduce
// each chunk, scan the chunk totals, rescan each chunk from its carry-in) over
// at::parallel_for, span by span, four chunks of a row interleaved per task. The interleaved
// stretches of half inputs convert their values and outputs a block at a time (in_blocks).
// Reductions, which write no per-element output, skip the scan: each segment is folded plainly
// (`reduce` in reduce_engine.h).
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../core/scan_problems.h"
#include "reduce_engine.h"
#include "row_pieces.h"

namespace parprims::cpu {

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
    int64_t i = 1;
    if constexpr (P::kConvertsInBlocks) i = in_blocks<kWrite, kOneRow, kExclusive>(cursors, ppos, n, acc);
    for (; i < n; ++i) {
      for (int r = 0; r < kPositions; ++r) ppos[r] += step;
      for (int r = 0; r < kInterleave; ++r) advance<kWrite, kExclusive>(cursors[kOneRow ? 0 : r], ppos[kOneRow ? r : 0], acc[r]);
    }
    for (int r = 0; r < kInterleave; ++r) carries[r] = acc[r];
  }

  // The interleaved stretches' next positions (after ppos) a block of up to kBlock at a time,
  // each block of each stretch converted to values in one loop, scanned, and its outputs
  // converted back in one loop (P::kConvertsInBlocks; the same combines in the same order).
  // Returns the count of positions done, from 1 (the heads): n, or 1 when the rows are strided.
  static constexpr int64_t kBlock = 64;
  template <bool kWrite, bool kOneRow, bool kExclusive>
  int64_t in_blocks(const Cursors<kOneRow>& cursors, int64_t (&ppos)[kOneRow ? kInterleave : 1], int64_t n,
                    Value (&acc)[kInterleave]) const {
    constexpr int kPositions = kOneRow ? kInterleave : 1;
    const bool forward = !g.reverse;
    Value values[kInterleave][kBlock];
    int64_t i = 1;
    for (int64_t m; i < n; i += m) {
      m = std::min(kBlock, n - i);
      // The block's lowest physical position, for each stretch.
      int64_t lo[kPositions];
      for (int r = 0; r < kPositions; ++r) lo[r] = forward ? ppos[r] + 1 : ppos[r] - m;
      for (int r = 0; r < kInterleave; ++r) {
        if (!problem.load_block(cursors[kOneRow ? 0 : r], lo[kOneRow ? r : 0], m, values[r])) return i;
      }
      for (int64_t j = 0; j < m; ++j) {
        const int64_t k = forward ? j : m - 1 - j;
        for (int r = 0; r < kInterleave; ++r) {
          const Value v = values[r][k];
          if constexpr (kExclusive) values[r][k] = acc[r];
          acc[r] = M::combine(acc[r], v);
          if constexpr (!kExclusive) values[r][k] = acc[r];
        }
      }
      if constexpr (kWrite) {
        for (int r = 0; r < kInterleave; ++r) {
          const Cursor& c = cursors[kOneRow ? 0 : r];
          if (problem.store_block(c, lo[kOneRow ? r : 0], m, values[r])) continue;
          for (int64_t k = 0; k < m; ++k) problem.store(c, lo[kOneRow ? r : 0] + k, values[r][k]);
        }
      }
      for (int r = 0; r < kPositions; ++r) ppos[r] += forward ? m : -m;
    }
    return i;
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
      if (quotient == 0) {  // (a last span shorter than its chunk count)
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
