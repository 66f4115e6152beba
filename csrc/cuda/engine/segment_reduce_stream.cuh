// The stream pass of the segment reductions (segment_reduce.cuh), for rows whose sequences are
// long enough on average (a few hundred positions and more; shorter ones go to the tile pass,
// which packs many sequences into one tile).
//
// Each warp streams one piece of a row (about one piece a resident warp, whatever the sequence
// lengths): rounds of 16-byte loads, two rounds in flight (the next one's loads are issued
// before the current one is folded), and each lane folds what it loaded into its own
// accumulator. Nothing is exchanged between lanes until a sequence ends: the warp holds the ends
// of the next 32 sequences in its lanes, and a round that no sequence ends in (most of them) is
// folded with no test per position. When one does, the lanes fold the round's positions up to
// that end, a warp tree gives the sequence's value, and the fold starts again after it. A
// sequence that starts in the piece and ends in it is written whole; the rest leave the head /
// tail partials that the fix-up combines in order (segment_reduce_pieces.cuh). Lanes take
// positions in a fixed order and the tree is fixed, so the result does not depend on
// scheduling; it assumes a commutative monoid (every reduction is one).
//
// Why not a warp per sequence: a warp's life is then a chain of round trips (the offsets, one
// or two rounds of loads, the tree) with little in flight between them, and a block retires
// with its longest sequence; that pass kept DRAM about half busy (benchmarks/NOTES.md). Here a
// warp has its loads in flight from the start of its piece to its end.
//
// Measured (benchmarks/NOTES.md, H200): the sum of 2^26 float32 in 65536 random-length
// sequences in 0.075 ms, 0.84 of the copy bandwidth (the warp pass: 0.54); max 0.78.
#pragma once

#include <cstring>

#include "dependent_launch.cuh"
#include "segment_reduce_pieces.cuh"
#include "segment_search.cuh"
#include "warp.cuh"

namespace parprims::cuda {

struct SegmentStreamPolicy {
  static constexpr int kThreads = 128;       // 4 warps a block
  static constexpr int kMinBlocksPerSM = 6;  // 24 warps an SM, 80 registers
  // A piece is a whole number of these positions (every round length divides it, so that the
  // pieces of an aligned row start aligned), at least kMinQuantaPerPiece of them, so that a
  // piece's search and tree are shared by enough positions; at most 2^30, so that positions
  // inside a piece fit an int. The quantum is small against a warp's share of a large input
  // (2^26 positions: 21184 a warp on an H200), so that rounding the share up to it leaves few
  // warps without a piece (2048: 2979 pieces for 3168 warps, 6 % of the GPU idle).
  static constexpr int64_t kPieceQuantum = 512;
  static constexpr int64_t kMinQuantaPerPiece = 8;
  static constexpr int64_t kMaxPieceLength = int64_t(1) << 30;
};

// A round of a warp's stream over a contiguous, aligned row: each lane loads kRuns 16-byte words
// (lane l word r holds the kRun positions from (r * 32 + l) * kRun), held as loaded until they
// are folded (converting a half-precision element at its load would wait for the load there).
template <class P>
struct WideRound {
  using In = typename P::Input;
  using Value = typename P::Value;
  static constexpr int kRun = 16 / static_cast<int>(sizeof(In));
  // 16 values a lane (fewer for 8-byte elements): narrow types load fewer words, not more
  // values, which would cost registers and a longer fold.
  static constexpr int kRuns = sizeof(In) < 4 ? static_cast<int>(sizeof(In)) : 4;
  static constexpr int kLength = 32 * kRuns * kRun;
  uint4 words[kRuns];

  static __device__ __forceinline__ int offset(int r, int k) { return (r * 32 + (threadIdx.x & 31)) * kRun + k; }

  // The round at `pos` of `base` (relative positions) up to `end`: 16-byte words when the
  // round is whole, else element by element (positions at or past `end` are never folded).
  __device__ __forceinline__ void load(const In* base, int pos, int end) {
    if (end - pos == kLength) {
#pragma unroll
      for (int r = 0; r < kRuns; ++r) words[r] = *reinterpret_cast<const uint4*>(base + pos + offset(r, 0));
      return;
    }
#pragma unroll
    for (int r = 0; r < kRuns; ++r) {
      In elements[kRun];
#pragma unroll
      for (int k = 0; k < kRun; ++k) {
        const int at = pos + offset(r, k);
        elements[k] = at < end ? base[at] : In();
      }
      memcpy(&words[r], elements, sizeof(elements));
    }
  }
  __device__ __forceinline__ Value value(const P& problem, int r, int k) const {
    In e;
    memcpy(&e, reinterpret_cast<const char*>(&words[r]) + k * sizeof(In), sizeof(In));
    return problem.element(e);
  }
  // Value i's position is lane_part() + constant_part(i): tests against a position take the
  // lane's part off the bounds once, and compare with constants (no register a value).
  static constexpr int kCount = kRuns * kRun;
  static __device__ __forceinline__ int lane_part() { return (threadIdx.x & 31) * kRun; }
  static __host__ __device__ constexpr int constant_part(int i) { return (i / kRun) * 32 * kRun + i % kRun; }
  __device__ __forceinline__ Value value_of(const P& problem, int i) const { return value(problem, i / kRun, i % kRun); }
};

// A round read element by element (a mask, a strided or misaligned row, a piece's first
// positions before the aligned ones): lane l holds positions l, l + 32, ...
template <class P>
struct ElementRound {
  using Value = typename P::Value;
  static constexpr int kCount = 8;
  static constexpr int kLength = 32 * kCount;
  Value v[kCount];

  static __device__ __forceinline__ int lane_part() { return threadIdx.x & 31; }
  static __host__ __device__ constexpr int constant_part(int i) { return i * 32; }
  static __device__ __forceinline__ int offset_of(int i) { return constant_part(i) + lane_part(); }
  template <class Cursor>
  __device__ __forceinline__ void load(const P& problem, const Cursor& cursor, int64_t begin, int pos, int end) {
    using M = typename P::Monoid;
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int at = pos + offset_of(i);
      v[i] = at < end ? problem.load(cursor, begin + at) : M::identity();
    }
  }
  __device__ __forceinline__ Value value_of(const P&, int i) const { return v[i]; }
};

// The sequence a warp is folding, in positions relative to its piece's first, and the ends of
// the next ones (lane j holds the end of sequence `batch + j`: one load a lane for 32 of them).
struct StreamSequence {
  int64_t segment;    // its index
  int64_t batch;      // the first sequence whose end `ends` holds
  int ends;           // this lane's
  int lo;             // positions before it are folded already (its start, or the piece's)
  int end;            // where it ends (the next one's start), never before lo
  bool started_here;  // whether it starts in this piece (else its part here is the piece's head)

  // Sequence k's end, read clamped into [0, limit]; the last one ends at the row's end whatever
  // the offsets say, so that no sequence past it is ever written.
  static __device__ __forceinline__ int relative_end(const ScanGeometry& g, int64_t k, int64_t begin, int limit) {
    const int64_t e = k + 1 < g.num_segments() ? clamped_start(g, k + 1) : g.len;
    return static_cast<int>(max(int64_t(0), min(e - begin, int64_t{limit})));
  }
  __device__ __forceinline__ void load_ends(const ScanGeometry& g, int64_t begin, int limit) {
    batch = segment;
    ends = relative_end(g, min(batch + (threadIdx.x & 31), g.num_segments() - 1), begin, limit);
  }
  // Moves on to the next sequence (a whole warp, the same values in every lane).
  __device__ __forceinline__ void advance(const ScanGeometry& g, int64_t begin, int limit) {
    ++segment;
    lo = end;
    started_here = true;
    if (segment - batch == 32) load_ends(g, begin, limit);
    end = max(lo, shfl_idx(ends, static_cast<int>(segment - batch)));
  }
};

// A warp's piece of one row: where it is, what it writes, and the fold.
template <class P, class Parts>
struct StreamPiece {
  using M = typename P::Monoid;
  using Value = typename P::Value;
  const P& problem;
  const ScanGeometry& g;
  const Parts& parts;
  int64_t row;
  int64_t final_row;  // where the row's results go (problem.final_row)
  int64_t begin;     // the piece's first position
  int length;        // its positions
  int64_t at;        // its slot in the partials
  StreamSequence s;  // the sequence being folded
  Value acc;         // this lane's part of it

  __device__ __forceinline__ int limit() const { return length + 1; }  // "ends after the piece"

  // Finds the sequence holding the piece's first position and the ends of the next ones.
  __device__ __forceinline__ void enter() {
    s.segment = warp_find_segment(g, begin);
    s.load_ends(g, begin, limit());
    s.lo = 0;
    s.end = shfl_idx(s.ends, 0);
    s.started_here = clamped_start(g, s.segment) >= begin;
    acc = M::identity();
  }

  // The sequence being folded ends in the round: its value (the warp's tree of the lanes' parts)
  // is written, whole or as the piece's head, and the fold goes on with the next one.
  __device__ __forceinline__ void finish_sequence() {
    const Value total = lanes_total();
    // An empty sequence has the empty result the host wrote.
    if ((threadIdx.x & 31) == 0 && s.end > s.lo) {
      if (s.started_here) problem.store_final_in_row(final_row, s.segment, total); else parts.head[at] = total;
    }
    acc = M::identity();
    s.advance(g, begin, limit());
  }

  // Folds the round's values at relative positions [lo, hi).
  template <class Round>
  __device__ __forceinline__ void fold_between(const Round& round, int lo, int hi) {
    lo -= Round::lane_part();
    hi -= Round::lane_part();
#pragma unroll
    for (int i = 0; i < Round::kCount; ++i) {
      if (Round::constant_part(i) >= lo && Round::constant_part(i) < hi) acc = M::combine(acc, round.value_of(problem, i));
    }
  }

  // The lanes' parts combined; lane 0 gets the total (a tree of fixed shape: the other lanes'
  // results are partial and unused, which spares a test a level).
  __device__ __forceinline__ Value lanes_total() const {
    Value v = acc;
#pragma unroll
    for (int delta = 1; delta < 32; delta <<= 1) v = M::combine(v, shfl_down(v, delta));
    return v;
  }

  // The round's values combined as a tree (kCount is a power of two): a float sum's rounding
  // error grows with the tree's depth (4), not with the values (16). Measured no faster than the
  // chain of combines (max's NaN-aware combine, four dependent instructions, is not the limit).
  template <int kWidth>
  static __device__ __forceinline__ void combine_halves(Value* v) {
#pragma unroll
    for (int i = 0; i < kWidth; ++i) v[i] = M::combine(v[i], v[i + kWidth]);
    if constexpr (kWidth > 1) combine_halves<kWidth / 2>(v);
  }
  template <class Round>
  __device__ __forceinline__ Value round_total(const Round& round) const {
    static_assert((Round::kCount & (Round::kCount - 1)) == 0, "a round's values: a power of two");
    Value v[Round::kCount];
#pragma unroll
    for (int i = 0; i < Round::kCount; ++i) v[i] = round.value_of(problem, i);
    if constexpr (Round::kCount > 1) combine_halves<Round::kCount / 2>(v);
    return v[0];
  }

  // Folds a round loaded at `pos` whose positions before `round_end` are in the piece.
  template <class Round>
  __device__ __forceinline__ void fold(const Round& round, int pos, int round_end) {
    if (s.end >= round_end && s.lo <= pos && round_end - pos == Round::kLength) {
      acc = M::combine(acc, round_total(round));
      return;  // the common case: a whole round inside one sequence, no test a position
    }
#pragma unroll 1
    while (s.end < round_end) {
      fold_between(round, s.lo - pos, s.end - pos);
      finish_sequence();
    }
    fold_between(round, s.lo - pos, round_end - pos);
  }

  // Streams the rounds from `pos` to the piece's end, two whole rounds in flight: `prime` issues
  // the loads of the first two (before `enter`, whose search then runs under them), and `stream`
  // folds `a` while `b`'s loads are out, then the other way round (a round copied into the one
  // folded next would wait for its loads where it is copied), then the last, partial round.
  // load(round, pos, end) loads a round; whole rounds get end = pos + kLength.
  template <class Round, class Load>
  __device__ __forceinline__ void prime(Round& a, Round& b, int pos, const Load& load) const {
    constexpr int K = Round::kLength;
    const int whole = (length - pos) / K;
    if (whole > 0) load(a, pos, pos + K);
    if (whole > 1) load(b, pos + K, pos + 2 * K);
  }
  template <class Round, class Load>
  __device__ __forceinline__ void stream(Round& a, Round& b, int pos, const Load& load) {
    constexpr int K = Round::kLength;
    const int whole = (length - pos) / K;
#pragma unroll 1
    for (int i = 0; i < whole; i += 2) {
      fold(a, pos, pos + K);
      pos += K;
      if (i + 2 < whole) load(a, pos + K, pos + 2 * K);
      if (i + 1 == whole) break;
      fold(b, pos, pos + K);
      pos += K;
      if (i + 3 < whole) load(b, pos + K, pos + 2 * K);
    }
    if (pos < length) {
      load(a, pos, length);
      fold(a, pos, length);
    }
  }

  // The piece's last sequence, which ends at or after the piece's end.
  __device__ __forceinline__ void finish_piece() {
    const Value total = lanes_total();
    if ((threadIdx.x & 31) != 0) return;
    if (!s.started_here) {
      parts.head[at] = total;
    } else if (s.end <= length) {
      problem.store_final_in_row(final_row, s.segment, total);
    } else {
      parts.tail[at] = total;
    }
  }
};

// The positions of a piece before its first 16-byte aligned one (fewer than a word's), one a lane.
template <class P>
struct PrologueRound {
  using In = typename P::Input;
  using Value = typename P::Value;
  static constexpr int kCount = 1;
  static constexpr int kLength = 32;
  Value v;
  static __device__ __forceinline__ int lane_part() { return threadIdx.x & 31; }
  static __host__ __device__ constexpr int constant_part(int) { return 0; }
  __device__ __forceinline__ void load(const P& problem, const In* base, int end) {
    v = lane_part() < end ? problem.element(base[lane_part()]) : P::Monoid::identity();
  }
  __device__ __forceinline__ Value value_of(const P&, int) const { return v; }
};

// Warp w of the grid folds pieces w, w + warps, ... (row-major, `piece_length` positions each),
// and row 0's warps write the segment holding each piece's first position (first_segment, for
// the fix-up).
// Launched as a dependent of the output's fill (run_stream_pass): a warp's first loads and its
// search overlap the fill's end, and it waits for the fill before it can store. kWide: the rows are contiguous arrays (problem.rows_contiguous()), read in 16-byte words;
// else element by element (a mask, a strided dimension).
template <class P, class Parts, bool kWide>
__global__ void __launch_bounds__(SegmentStreamPolicy::kThreads, SegmentStreamPolicy::kMinBlocksPerSM)
    segment_reduce_stream_kernel(const P problem, const ScanGeometry g, const Parts parts, int64_t* first_segment,
                                 int64_t pieces, int64_t piece_length) {
  using In = typename P::Input;
  if (pieces > 1) allow_dependent_launch();  // the fix-up follows (see allow_dependent_launch)
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (SegmentStreamPolicy::kThreads / 32);
  const int64_t items = g.rows * pieces;
  for (int64_t item = (static_cast<int64_t>(blockIdx.x) * SegmentStreamPolicy::kThreads + threadIdx.x) / 32;
       item < items; item += warps) {
    const int64_t row = item / pieces;
    const int64_t piece = item - row * pieces;
    const int64_t begin = piece * piece_length;
    StreamPiece<P, Parts> w{problem, g, parts, row, problem.final_row(row), begin,
                            static_cast<int>(min(piece_length, g.len - begin)), parts.at(row, piece)};
    const auto cursor = problem.cursor(row);
    if constexpr (kWide) {
      const In* base = problem.contiguous_row(cursor) + begin;
      // An element's address is a multiple of its size, which divides 16.
      const int body = min(w.length, static_cast<int>((16 - reinterpret_cast<uintptr_t>(base) % 16) % 16 / sizeof(In)));
      const auto load = [&](WideRound<P>& round, int pos, int end) { round.load(base, pos, end); };
      PrologueRound<P> prologue;
      WideRound<P> a, b;
      if (body > 0) prologue.load(problem, base, body);
      w.prime(a, b, body, load);
      w.enter();
      if (row == 0 && (threadIdx.x & 31) == 0) first_segment[piece] = w.s.segment;
      wait_for_prerequisite_grid();  // the output's fill, before the first store
      if (body > 0) w.fold(prologue, 0, body);
      w.stream(a, b, body, load);
    } else {
      const auto load = [&](ElementRound<P>& round, int pos, int end) { round.load(problem, cursor, begin, pos, end); };
      ElementRound<P> a, b;
      w.prime(a, b, 0, load);
      w.enter();
      if (row == 0 && (threadIdx.x & 31) == 0) first_segment[piece] = w.s.segment;
      wait_for_prerequisite_grid();  // the output's fill, before the first store
      w.stream(a, b, 0, load);
    }
    w.finish_piece();
  }
}

}  // namespace parprims::cuda
