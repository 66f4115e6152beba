// Problems of the affine recurrences h_t = a_t h_{t-1} + b_t (elementwise) and
// h_t = A_t h_{t-1} + b_t (small dense matrices), for the same engines as every scan.
//
// Initial states enter at each segment's first element (in scan order), by composing that
// element's map with the constant map to the initial state; the final state of a segment is
// the inclusive value at its last element. States are indexed `segment * rows + row`.
// Torch-free.
#pragma once

#include "scan_problems.h"

namespace parprims {

struct ThreeCursor {
  int64_t a, b, h;
};

// `In` is the storage type of a, b and h; `C` the type the recurrence computes in; `State` the
// storage type of the initial and final states (float for half inputs).
template <class In, class C, class State = C>
struct AffineProblem : ProblemBase<Affine<C>> {
  using Value = typename Affine<C>::value_type;
  static constexpr int kInputBytes = static_cast<int>(sizeof(In));
  using Cursor = ThreeCursor;
  const In* a = nullptr;
  const In* b = nullptr;
  In* h = nullptr;
  const State* initial = nullptr;  // (segments, rows) or nullptr for zeros
  State* final_state = nullptr;    // (segments, rows)
  int64_t rows = 0;
  bool log_gates = false;
  RowIndexer a_rows, b_rows, h_rows;

  PP_HD Cursor cursor(int64_t row) const {
    return {a_rows.row_offset(row), b_rows.row_offset(row), h_rows.row_offset(row)};
  }
  PP_HD Value load(const Cursor& c, int64_t pos) const {
    const C gate = static_cast<C>(a[c.a + pos * a_rows.stride_len]);
    return {log_gates ? exp_any(gate) : gate, static_cast<C>(b[c.b + pos * b_rows.stride_len])};
  }
  PP_HD void store(const Cursor& c, int64_t pos, const Value& v) const {
    h[c.h + pos * h_rows.stride_len] = static_cast<In>(v.b);
  }
  template <int N>
  PP_HD bool load_run(const Cursor& c, int64_t pos, Value (&values)[N]) const {
    if (a_rows.stride_len != 1 || b_rows.stride_len != 1) return false;
    In ra[N], rb[N];
    if (!load_wide<N>(a + c.a + pos, ra) || !load_wide<N>(b + c.b + pos, rb)) return false;
    PP_UNROLL
    for (int i = 0; i < N; ++i) {
      const C gate = static_cast<C>(ra[i]);
      values[i] = {log_gates ? exp_any(gate) : gate, static_cast<C>(rb[i])};
    }
    return true;
  }
  // Runs loaded ahead of their use (the row loop, the column kernel): gates and inputs as
  // loaded, converted when used. Only for inputs narrower than the computation: on an H200,
  // held runs made the bfloat16 recurrence 12-15 % faster ((8, 2048, 4096): 0.184 -> 0.158 ms)
  // but the float32 row loop 5 % slower (0.226 -> 0.237 ms), which loads into the values'
  // registers directly.
  static constexpr bool kHoldsRawRuns = sizeof(In) < sizeof(C);
  template <int N, template <class, int> class Holder>
  struct RawRun {
    Holder<In, N> a, b;
  };
  template <class Raw>
  PP_HD bool load_raw_run(const Cursor& c, int64_t pos, Raw& raw) const {
    return a_rows.stride_len == 1 && b_rows.stride_len == 1 && raw.a.load_wide(a + c.a + pos) &&
           raw.b.load_wide(b + c.b + pos);
  }
  template <class Raw>
  PP_HD void load_raw(const Cursor& c, int64_t pos, int k, Raw& raw) const {
    raw.a.set(k, a[c.a + pos * a_rows.stride_len]);
    raw.b.set(k, b[c.b + pos * b_rows.stride_len]);
  }
  template <class Raw>
  PP_HD Value from_raw(const Raw& raw, int k) const {
    const C gate = static_cast<C>(raw.a.get(k));
    return {log_gates ? exp_any(gate) : gate, static_cast<C>(raw.b.get(k))};
  }
  template <int N>
  PP_HD bool store_run(const Cursor& c, int64_t pos, const Value (&values)[N]) const {
    if (h_rows.stride_len != 1) return false;
    In raw[N];
    PP_UNROLL
    for (int i = 0; i < N; ++i) raw[i] = static_cast<In>(values[i].b);
    return store_wide<N>(h + c.h + pos, raw);
  }
  // The CPU engine's blocks (ScanProblem says why): half gates, inputs and states.
  static constexpr bool kConvertsInBlocks = sizeof(In) == 2 && std::is_floating_point_v<C>;
  bool load_block(const Cursor& c, int64_t pos, int64_t n, Value* values) const {
    if (a_rows.stride_len != 1 || b_rows.stride_len != 1) return false;
    const In* ga = a + c.a + pos;
    const In* gb = b + c.b + pos;
    for (int64_t i = 0; i < n; ++i) values[i] = {static_cast<C>(ga[i]), static_cast<C>(gb[i])};
    if (log_gates) {
      for (int64_t i = 0; i < n; ++i) values[i].a = exp_any(values[i].a);
    }
    return true;
  }
  bool store_block(const Cursor& c, int64_t pos, int64_t n, const Value* values) const {
    if (h_rows.stride_len != 1) return false;
    In* to = h + c.h + pos;
    for (int64_t i = 0; i < n; ++i) to[i] = static_cast<In>(values[i].b);
    return true;
  }
  PP_HD Value at_head(const Value& v, int64_t row, int64_t segment) const {
    if (initial == nullptr) return v;
    return {v.a, v.a * static_cast<C>(initial[segment * rows + row]) + v.b};
  }
  PP_HD Value exclusive_head(int64_t row, int64_t segment) const {
    return {C(1), initial == nullptr ? C(0) : static_cast<C>(initial[segment * rows + row])};
  }
  PP_HD void store_final(int64_t row, int64_t segment, const Value& v) const {
    final_state[segment * rows + row] = static_cast<State>(v.b);
  }
};

// The conjugate of a complex value (torch's gradients of complex maps are conjugated); the
// value itself for a real one.
template <class T>
PP_HD T conj_any(const T& x) {
  if constexpr (is_complex_like<T>::value) {
    return T(x.real(), -x.imag());
  } else {
    return x;
  }
}

struct GradCursor {
  int64_t a, grad_h, h, grad_a, grad_b;
  int64_t row;  // for the initial state, read before the forward's first step
};

// The backward of the elementwise recurrence in one scan (rows without packed sequences). With
// lambda_t the gradient reaching h_t (t in the forward's order, T steps):
//   lambda_{T-1} = grad_h_{T-1} + grad_final,  lambda_t = grad_h_t + conj(a_{t+1}) lambda_{t+1}
// an affine scan in the other direction, whose element at step t is (conj(a_{t+1}), grad_h_t).
// It writes grad_b_t = lambda_t and grad_a_t = lambda_t conj(h_{t-1}) (times conj(a_t) for log
// gates: d exp(x)/dx), reading h_{t-1} from the forward's output (the initial state, or zero,
// before the first step), and grad_initial = conj(a_0) lambda_0. Every position reads its
// neighbour in time (a_{t+1}, h_{t-1}); wide runs load one extra element for it.
// Positions here are physical: the forward's step t+1 is position p+1, or p-1 when the forward
// ran in reverse (`forward_reverse`); the engine scans in the other direction.
template <class In, class C, class State = C>
struct AffineGradProblem : ProblemBase<Affine<C>> {
  using Value = typename Affine<C>::value_type;
  using Cursor = GradCursor;
  // A run reads a, grad_h and h, each with a neighbour (H200, (8, 2048, 4096) float32, 128-thread
  // blocks: capped at 96 registers it spilled 284 bytes a thread and took 0.665 ms; at 128, 0.494
  // ms). With its input size declared it takes the forward's small blocks (64 x 8, ten an SM at
  // 96 registers, 24 bytes of spills): H100, float32 0.505 -> 0.485 ms, bfloat16 0.344 -> 0.309.
  static constexpr bool kNeedsMoreRegisters = true;
  static constexpr int kInputBytes = static_cast<int>(sizeof(In));
  static constexpr bool kStoreReadsInputs = true;
  static constexpr bool kPackedSequences = false;  // (composed of other scans with them: ops/affine.py)
  const In* a = nullptr;
  const In* grad_h = nullptr;
  const In* h = nullptr;                // the forward's output
  In* grad_a = nullptr;                 // b's shape (summed to a's by the caller)
  In* grad_b = nullptr;
  const State* grad_final = nullptr;    // (rows) or nullptr for zeros
  const State* initial = nullptr;       // the forward's (rows), or nullptr for zeros
  State* grad_initial = nullptr;        // (rows)
  int64_t rows = 0;
  int64_t len = 0;
  bool log_gates = false;
  bool forward_reverse = false;
  RowIndexer a_rows, grad_h_rows, h_rows, grad_a_rows, grad_b_rows;

  PP_HD Cursor cursor(int64_t row) const {
    return {a_rows.row_offset(row), grad_h_rows.row_offset(row), h_rows.row_offset(row),
            grad_a_rows.row_offset(row), grad_b_rows.row_offset(row), row};
  }
  PP_HD C gate(const Cursor& c, int64_t pos) const {
    const C x = static_cast<C>(a[c.a + pos * a_rows.stride_len]);
    return log_gates ? exp_any(x) : x;
  }
  // The forward's next and previous positions after / before `pos`, or -1 outside the row.
  PP_HD int64_t next_step(int64_t pos) const {
    const int64_t p = forward_reverse ? pos - 1 : pos + 1;
    return p < len ? p : -1;
  }
  PP_HD int64_t previous_step(int64_t pos) const {
    const int64_t p = forward_reverse ? pos + 1 : pos - 1;
    return p < len ? p : -1;
  }
  // h_{t-1} of the step at `pos`: the forward's output one step back, or the initial state.
  PP_HD C h_before(const Cursor& c, int64_t pos) const {
    const int64_t p = previous_step(pos);
    if (p >= 0) return static_cast<C>(h[c.h + p * h_rows.stride_len]);
    return initial == nullptr ? C(0) : static_cast<C>(initial[c.row]);
  }

  PP_HD Value load(const Cursor& c, int64_t pos) const {
    const int64_t next = next_step(pos);
    // The last step's gate multiplies nothing (at_head starts the scan there); 1 keeps it a map.
    const C next_gate = next >= 0 ? conj_any(gate(c, next)) : C(1);
    return {next_gate, static_cast<C>(grad_h[c.grad_h + pos * grad_h_rows.stride_len])};
  }
  PP_HD void store(const Cursor& c, int64_t pos, const Value& v) const {
    C da = v.b * conj_any(h_before(c, pos));
    if (log_gates) da = da * conj_any(gate(c, pos));
    grad_a[c.grad_a + pos * grad_a_rows.stride_len] = static_cast<In>(da);
    grad_b[c.grad_b + pos * grad_b_rows.stride_len] = static_cast<In>(v.b);
  }
  // The positions first + k * step: every h_{t-1} (and gate) read before the first store.
  template <int N>
  PP_HD void store_steps(const Cursor& c, int64_t first, int64_t step, const Value (&values)[N]) const {
    C factor[N];
    PP_UNROLL
    for (int k = 0; k < N; ++k) factor[k] = conj_any(h_before(c, first + k * step));
    if (log_gates) {
      PP_UNROLL
      for (int k = 0; k < N; ++k) factor[k] = factor[k] * conj_any(gate(c, first + k * step));
    }
    PP_UNROLL
    for (int k = 0; k < N; ++k) {
      const int64_t pos = first + k * step;
      grad_a[c.grad_a + pos * grad_a_rows.stride_len] = static_cast<In>(values[k].b * factor[k]);
      grad_b[c.grad_b + pos * grad_b_rows.stride_len] = static_cast<In>(values[k].b);
    }
  }

  // Element i's neighbour in a run: element i + 1 if `higher`, else i - 1 (clamped to the run;
  // the caller takes the edge element there). The run's index is a constant in each unrolled
  // iteration, with a select between the two: an index chosen at run time (by forward_reverse)
  // would put the whole run in local memory (H200: 32 bytes of stack; the backward took 0.494 ms
  // with it, 0.4215 without, at (8, 2048, 4096) float32).
  template <int N>
  PP_HD static In neighbour(const In (&run)[N], int i, bool higher) {
    const In up = run[i + 1 < N ? i + 1 : N - 1];
    const In down = run[i > 0 ? i - 1 : 0];
    return higher ? up : down;
  }

  // Runs of N positions from `lo`, with wide accesses: the neighbours in time are the run's
  // own elements shifted by one, plus one element read on its own at the run's edge.
  template <int N>
  PP_HD bool load_run(const Cursor& c, int64_t lo, Value (&values)[N]) const {
    if (a_rows.stride_len != 1 || grad_h_rows.stride_len != 1) return false;
    In ra[N], rg[N];
    if (!load_wide<N>(a + c.a + lo, ra) || !load_wide<N>(grad_h + c.grad_h + lo, rg)) return false;
    const int64_t edge = forward_reverse ? lo - 1 : lo + N;  // the next step of the run's last
    const C edge_gate = (edge >= 0 && edge < len) ? conj_any(gate(c, edge)) : C(1);
    PP_UNROLL
    for (int i = 0; i < N; ++i) {
      const In next = neighbour(ra, i, !forward_reverse);
      C g = edge_gate;
      if (forward_reverse ? i > 0 : i < N - 1) {
        const C x = static_cast<C>(next);
        g = conj_any(log_gates ? exp_any(x) : x);
      }
      values[i] = {g, static_cast<C>(rg[i])};
    }
    return true;
  }
  template <int N>
  PP_HD bool store_run(const Cursor& c, int64_t lo, const Value (&values)[N]) const {
    if (h_rows.stride_len != 1 || grad_a_rows.stride_len != 1 || grad_b_rows.stride_len != 1 ||
        (log_gates && a_rows.stride_len != 1)) {
      return false;
    }
    In rh[N], ra[N];
    if (!load_wide<N>(h + c.h + lo, rh)) return false;
    if (log_gates && !load_wide<N>(a + c.a + lo, ra)) return false;
    const C edge_h = h_before(c, forward_reverse ? lo + N - 1 : lo);  // the run's first step's
    In da[N], db[N];
    PP_UNROLL
    for (int i = 0; i < N; ++i) {
      const In previous = neighbour(rh, i, forward_reverse);
      const C before = (forward_reverse ? i < N - 1 : i > 0) ? static_cast<C>(previous) : edge_h;
      C d = values[i].b * conj_any(before);
      if (log_gates) d = d * conj_any(exp_any(static_cast<C>(ra[i])));
      da[i] = static_cast<In>(d);
      db[i] = static_cast<In>(values[i].b);
    }
    return store_wide<N>(grad_a + c.grad_a + lo, da) && store_wide<N>(grad_b + c.grad_b + lo, db);
  }

  PP_HD Value at_head(const Value& v, int64_t row, int64_t /*segment*/) const {
    return {v.a, grad_final == nullptr ? v.b : v.b + static_cast<C>(grad_final[row])};
  }
  PP_HD void store_final(int64_t row, int64_t /*segment*/, const Value& v) const {
    const Cursor c = cursor(row);
    const int64_t first = forward_reverse ? len - 1 : 0;
    grad_initial[row] = static_cast<State>(conj_any(gate(c, first)) * v.b);
  }
};

// A: (..., L, D, D) row-major in its last two dims; b and h: (..., L, D). The row enumeration
// is over b's leading dims; `a_mat_stride` / `b_vec_stride` step within a matrix / vector.
// `T` is the storage type of every tensor, `C` the type the recurrence computes in.
template <class T, int D, class C = T>
struct MatrixAffineProblem : ProblemBase<MatrixAffine<C, D>> {
  using Value = typename MatrixAffine<C, D>::value_type;
  using Cursor = ThreeCursor;
  const T* A = nullptr;
  const T* b = nullptr;
  T* h = nullptr;
  const T* initial = nullptr;  // (segments, rows, d)
  T* final_state = nullptr;    // (segments, rows, d)
  int64_t rows = 0;
  int d = D;  // the real state size (<= D); the rest is zero padding
  int64_t A_row_stride = 0, A_col_stride = 0, b_stride = 0, h_stride = 0;
  RowIndexer A_rows, b_rows, h_rows;

  PP_HD Cursor cursor(int64_t row) const {
    return {A_rows.row_offset(row), b_rows.row_offset(row), h_rows.row_offset(row)};
  }
  PP_HD Value load(const Cursor& c, int64_t pos) const {
    Value v;
    const T* Ap = A + c.a + pos * A_rows.stride_len;
    const T* bp = b + c.b + pos * b_rows.stride_len;
    PP_UNROLL
    for (int i = 0; i < D; ++i) {
      v.b[i] = i < d ? static_cast<C>(bp[i * b_stride]) : C(0);
      PP_UNROLL
      for (int j = 0; j < D; ++j) {
        v.A[i * D + j] = (i < d && j < d) ? static_cast<C>(Ap[i * A_row_stride + j * A_col_stride]) : C(0);
      }
    }
    return v;
  }
  PP_HD void store(const Cursor& c, int64_t pos, const Value& v) const {
    T* hp = h + c.h + pos * h_rows.stride_len;
    PP_UNROLL
    for (int i = 0; i < D; ++i) {
      if (i < d) hp[i * h_stride] = static_cast<T>(v.b[i]);
    }
  }
  PP_HD Value at_head(const Value& v, int64_t row, int64_t segment) const {
    if (initial == nullptr) return v;
    const T* h0 = initial + (segment * rows + row) * d;
    Value r = v;
    PP_UNROLL
    for (int i = 0; i < D; ++i) {
      C acc = v.b[i];
      PP_UNROLL
      for (int k = 0; k < D; ++k) acc += k < d ? v.A[i * D + k] * static_cast<C>(h0[k]) : C(0);
      r.b[i] = acc;
    }
    return r;
  }
  PP_HD Value exclusive_head(int64_t row, int64_t segment) const {
    Value v = MatrixAffine<C, D>::identity();
    if (initial != nullptr) {
      const T* h0 = initial + (segment * rows + row) * d;
      PP_UNROLL
      for (int i = 0; i < D; ++i) v.b[i] = i < d ? static_cast<C>(h0[i]) : C(0);
    }
    return v;
  }
  PP_HD void store_final(int64_t row, int64_t segment, const Value& v) const {
    T* f = final_state + (segment * rows + row) * d;
    PP_UNROLL
    for (int i = 0; i < D; ++i) {
      if (i < d) f[i] = static_cast<T>(v.b[i]);
    }
  }
};

}  // namespace parprims
