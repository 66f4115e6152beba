// The backward of a max or min scan, read from the forward's output alone (no indices, no second
// pass over the input). Torch-free.
//
// The outputs that come from one input position form a run in scan order: a source keeps its
// place until another value takes over, and never returns. A run starts where the output
// changes value (NaN equal to NaN: the first NaN stays), and at the row's first step, so the
// forward's output tells every run apart. The gradient of a source is the sum of the output
// gradients over its run, and zero at every other position. That is a segmented sum against
// the scan order whose groups end at the run starts: one scan, in the other direction, whose
// element at step t is (grad_t, "a run starts after t"), stored at the run's first step.
// Sums, not products with 0/1 gates: an infinite gradient stays inside its own run. Packed
// sequences add their first steps (in scan order) to the run starts, marked in `starts` by the
// caller: no run crosses a sequence boundary, so the engine scans whole rows, as without them.
// Their instance (kMarks) is separate: the marks' loads and tests cost rows without sequences
// 10 % (float32) to 24 % (bfloat16) of the backward's time on an H100 when both shared one.
//
// With an exclusive forward, output t holds the inclusive value of step t - 1 (the identity at
// step 0), so source t owns the run of outputs that starts at t + 1: everything is read one
// step later, and a sequence's last step is nobody's source.
//
// Positions are physical: the forward's step t + 1 is position p + 1, or p - 1 when the forward
// ran in reverse (`forward_reverse`); the engine scans in the other direction.
#pragma once

#include "scan_problems.h"

namespace parprims {

template <class In, class C, bool kMarks>
struct ExtremeScanGradProblem : ProblemBase<Segmented<Add<C>>> {
  using Value = typename Segmented<Add<C>>::value_type;
  static constexpr int kInputBytes = static_cast<int>(sizeof(In));
  // Loads and stores read neighbours of the forward's output.
  static constexpr bool kNeedsMoreRegisters = true;
  static constexpr bool kStoreReadsInputs = true;
  // The engine's geometry never has packed sequences (they come as marks).
  static constexpr bool kPackedSequences = false;
  struct Cursor {
    int64_t grad, out, grad_in;
  };
  const In* grad = nullptr;  // the gradient of the forward's output
  const In* out = nullptr;   // the forward's output
  In* grad_in = nullptr;
  const uint8_t* starts = nullptr;  // kMarks: 1 at each sequence's first step, by position along the dim
  int64_t len = 0;
  bool exclusive = false;
  bool forward_reverse = false;
  RowIndexer grad_rows, out_rows, grad_in_rows;

  PP_HD Cursor cursor(int64_t row) const {
    return {grad_rows.row_offset(row), out_rows.row_offset(row), grad_in_rows.row_offset(row)};
  }
  // The position `steps` steps after `pos` in the forward's order, or -1 outside the row.
  PP_HD int64_t later(int64_t pos, int64_t steps) const {
    const int64_t p = forward_reverse ? pos - steps : pos + steps;
    return p >= 0 && p < len ? p : -1;
  }
  PP_HD bool sequence_starts_at(int64_t pos) const {
    if constexpr (kMarks) {
      return starts[pos] != 0;
    } else {
      return false;
    }
  }
  // The step after `pos` in its sequence, or -1.
  PP_HD int64_t next_in_sequence(int64_t pos) const {
    const int64_t p = later(pos, 1);
    return p >= 0 && !sequence_starts_at(p) ? p : -1;
  }
  PP_HD C output(const Cursor& c, int64_t pos) const { return static_cast<C>(out[c.out + pos * out_rows.stride_len]); }
  static PP_HD bool same(const C& x, const C& y) { return x == y || (is_nan(x) && is_nan(y)); }
  // The output position of the first step of source `pos`'s run (-1: none).
  PP_HD int64_t run_first(int64_t pos) const { return exclusive ? next_in_sequence(pos) : pos; }

  // The element of `pos`: the gradient of its run's output there, and whether that output is
  // the last of its run (the group's head in the engine's order).
  static PP_HD Value element(C g, C here, bool has_next, C next_value) {
    return {g, !has_next || !same(next_value, here)};
  }
  PP_HD Value load(const Cursor& c, int64_t pos) const {
    const int64_t q = run_first(pos);
    if (q < 0) return {C(0), true};
    const int64_t next = next_in_sequence(q);
    const C here = output(c, q);
    return element(static_cast<C>(grad[c.grad + q * grad_rows.stride_len]), here, next >= 0,
                   next >= 0 ? output(c, next) : here);
  }
  // Whether `pos` is a source: its run's first output exists and `pos` is its row's or its
  // sequence's first step, or that output differs from the one before it.
  PP_HD bool is_source(const Cursor& c, int64_t pos) const {
    const int64_t q = run_first(pos);
    if (q < 0) return false;
    if (later(pos, -1) < 0 || sequence_starts_at(pos)) return true;
    return !same(output(c, q), output(c, later(q, -1)));
  }
  PP_HD void store(const Cursor& c, int64_t pos, const Value& v) const {
    grad_in[c.grad_in + pos * grad_in_rows.stride_len] = static_cast<In>(is_source(c, pos) ? v.value : C(0));
  }
  // The positions first + k * step: every neighbour read before the first store.
  template <int N>
  PP_HD void store_steps(const Cursor& c, int64_t first, int64_t step, const Value (&values)[N]) const {
    bool source[N];
    PP_UNROLL
    for (int k = 0; k < N; ++k) source[k] = is_source(c, first + k * step);
    PP_UNROLL
    for (int k = 0; k < N; ++k) {
      grad_in[c.grad_in + (first + k * step) * grad_in_rows.stride_len] =
          static_cast<In>(source[k] ? values[k].value : C(0));
    }
  }

  // Element i's neighbour in a run: element i + 1 if `higher`, else i - 1 (clamped to the run;
  // the caller takes the edge element there), as AffineGradProblem's (a run index chosen at
  // run time would put the run in local memory).
  template <class T, int N>
  PP_HD static T neighbour(const T (&run)[N], int i, bool higher) {
    const In up = run[i + 1 < N ? i + 1 : N - 1];
    const In down = run[i > 0 ? i - 1 : 0];
    return higher ? up : down;
  }

  // The sequence-start marks of the run of N positions from `lo` (all clear without packed
  // sequences); false when they cannot be read wide.
  template <int N>
  PP_HD bool load_starts(int64_t lo, uint8_t (&marks)[N]) const {
    if constexpr (kMarks) {
      return load_wide<N>(starts + lo, marks);
    } else {
      PP_UNROLL
      for (int i = 0; i < N; ++i) marks[i] = 0;
      return true;
    }
  }

  // Runs of N positions from `lo` with wide accesses (inclusive forwards; an exclusive one
  // reads everything a step away, which wide accesses would not align with): the next output
  // of each is the run's own neighbour, or one element read on its own at the run's edge.
  template <int N>
  PP_HD bool load_run(const Cursor& c, int64_t lo, Value (&values)[N]) const {
    if (exclusive || grad_rows.stride_len != 1 || out_rows.stride_len != 1) return false;
    In rg[N], ro[N];
    uint8_t marks[N];
    if (!load_wide<N>(grad + c.grad + lo, rg) || !load_wide<N>(out + c.out + lo, ro) || !load_starts<N>(lo, marks)) {
      return false;
    }
    const int64_t edge = forward_reverse ? lo - 1 : lo + N;  // the step after the run's last
    const bool has_edge = edge >= 0 && edge < len && !sequence_starts_at(edge);
    const C edge_value = has_edge ? output(c, edge) : C(0);
    PP_UNROLL
    for (int i = 0; i < N; ++i) {
      const bool inside = forward_reverse ? i > 0 : i < N - 1;
      const bool has_next = inside ? neighbour(marks, i, !forward_reverse) == 0 : has_edge;
      const C next_value = inside ? static_cast<C>(neighbour(ro, i, !forward_reverse)) : edge_value;
      values[i] = element(static_cast<C>(rg[i]), static_cast<C>(ro[i]), has_next, next_value);
    }
    return true;
  }
  template <int N>
  PP_HD bool store_run(const Cursor& c, int64_t lo, const Value (&values)[N]) const {
    if (exclusive || out_rows.stride_len != 1 || grad_in_rows.stride_len != 1) return false;
    In ro[N];
    uint8_t marks[N];
    if (!load_wide<N>(out + c.out + lo, ro) || !load_starts<N>(lo, marks)) return false;
    const int64_t edge = forward_reverse ? lo + N : lo - 1;  // the step before the run's first
    const bool has_edge = edge >= 0 && edge < len;
    const C edge_value = has_edge ? output(c, edge) : C(0);
    In result[N];
    PP_UNROLL
    for (int i = 0; i < N; ++i) {
      const bool inside = forward_reverse ? i < N - 1 : i > 0;
      const C before = inside ? static_cast<C>(neighbour(ro, i, forward_reverse)) : edge_value;
      const bool first = !(inside || has_edge) || marks[i] != 0;  // its row's or its sequence's first step
      const bool source = first || !same(static_cast<C>(ro[i]), before);
      result[i] = static_cast<In>(source ? values[i].value : C(0));
    }
    return store_wide<N>(grad_in + c.grad_in + lo, result);
  }
};

}  // namespace parprims
