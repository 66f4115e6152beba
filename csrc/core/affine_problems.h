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
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const C gate = static_cast<C>(ra[i]);
      values[i] = {log_gates ? exp_any(gate) : gate, static_cast<C>(rb[i])};
    }
    return true;
  }
  template <int N>
  PP_HD bool store_run(const Cursor& c, int64_t pos, const Value (&values)[N]) const {
    if (h_rows.stride_len != 1) return false;
    In raw[N];
#pragma unroll
    for (int i = 0; i < N; ++i) raw[i] = static_cast<In>(values[i].b);
    return store_wide<N>(h + c.h + pos, raw);
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
#pragma unroll
    for (int i = 0; i < D; ++i) {
      v.b[i] = i < d ? static_cast<C>(bp[i * b_stride]) : C(0);
#pragma unroll
      for (int j = 0; j < D; ++j) {
        v.A[i * D + j] = (i < d && j < d) ? static_cast<C>(Ap[i * A_row_stride + j * A_col_stride]) : C(0);
      }
    }
    return v;
  }
  PP_HD void store(const Cursor& c, int64_t pos, const Value& v) const {
    T* hp = h + c.h + pos * h_rows.stride_len;
#pragma unroll
    for (int i = 0; i < D; ++i) {
      if (i < d) hp[i * h_stride] = static_cast<T>(v.b[i]);
    }
  }
  PP_HD Value at_head(const Value& v, int64_t row, int64_t segment) const {
    if (initial == nullptr) return v;
    const T* h0 = initial + (segment * rows + row) * d;
    Value r = v;
#pragma unroll
    for (int i = 0; i < D; ++i) {
      C acc = v.b[i];
#pragma unroll
      for (int k = 0; k < D; ++k) acc += k < d ? v.A[i * D + k] * static_cast<C>(h0[k]) : C(0);
      r.b[i] = acc;
    }
    return r;
  }
  PP_HD Value exclusive_head(int64_t row, int64_t segment) const {
    Value v = MatrixAffine<C, D>::identity();
    if (initial != nullptr) {
      const T* h0 = initial + (segment * rows + row) * d;
#pragma unroll
      for (int i = 0; i < D; ++i) v.b[i] = i < d ? static_cast<C>(h0[i]) : C(0);
    }
    return v;
  }
  PP_HD void store_final(int64_t row, int64_t segment, const Value& v) const {
    T* f = final_state + (segment * rows + row) * d;
#pragma unroll
    for (int i = 0; i < D; ++i) {
      if (i < d) f[i] = static_cast<T>(v.b[i]);
    }
  }
};

}  // namespace parprims
