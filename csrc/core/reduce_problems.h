// Reductions as scan problems: a block reduction is a block scan's aggregate.
//
// A reduction problem loads elements into a monoid and writes one value per (row, segment) in
// `store_final`; nothing is written per element (store and store_run do nothing). The CPU
// engine folds each segment plainly (`reduce` in cpu/reduce_engine.h, taken for `kReductionOnly`);
// the CUDA segment-reduce engine (cuda/engine/segment_reduce.cuh) folds pieces of each row and
// combines the pieces' partial values for the segments that cross them. A segment
// with no element never reaches store_final: the host fills the output with the empty result
// first (ReduceTraits::empty_result).
//
// `segment_reduce` cuts the reduced dimension by packed-sequence offsets; `reduce` is one segment
// per row, optionally masked (a masked-out element loads as the identity). Torch-free.
#pragma once

#include "scan_problems.h"

namespace parprims {

// How an element enters a reduction's monoid and how the aggregate becomes the output. The
// default: the element itself and the aggregate itself.
template <class M>
struct ReduceTraits {
  using Value = typename M::value_type;
  using Result = Value;
  template <class In>
  static PP_HD Value element(const In& x) { return static_cast<Value>(x); }
  static PP_HD Result result(const Value& v) { return v; }
  static PP_HD Result empty_result() { return M::identity(); }
};

// The mean: (sum, count) pairs, divided once at the end; no element gives 0.
template <class T>
struct ReduceTraits<SumCount<T>> {
  using Value = typename SumCount<T>::value_type;
  using Result = T;
  template <class In>
  static PP_HD Value element(const In& x) { return {static_cast<T>(x), int64_t(1)}; }
  static PP_HD Result result(const Value& v) {
    return v.count > 0 ? v.sum / static_cast<T>(v.count) : T(0);
  }
  static PP_HD Result empty_result() { return T(0); }
};

// Reads `In`, reduces in `M::value_type`, writes one `Out` per (row, segment): out_rows
// enumerates the rows like in_rows and steps along the reduced dimension by segment.
template <class M, class In, class Out>
struct ReduceProblem : ProblemBase<M> {
  using Value = typename M::value_type;
  using Traits = ReduceTraits<M>;
  static constexpr bool kReductionOnly = true;
  struct Cursor {
    int64_t in;
    int64_t mask;
  };
  const In* in = nullptr;
  const bool* mask = nullptr;  // null: every element counts
  Out* out = nullptr;
  RowIndexer in_rows, mask_rows, out_rows;

  PP_HD Cursor cursor(int64_t row) const {
    return {in_rows.row_offset(row), mask != nullptr ? mask_rows.row_offset(row) : 0};
  }
  PP_HD Value load(const Cursor& c, int64_t pos) const {
    return kept(c, pos) ? Traits::element(*address(c, pos)) : M::identity();
  }
  // Whether rows c[0], c[1], ... hold their elements side by side (row r's at c[0].in + r, at
  // every position) and share their mask elements (or have no mask): a reduction over a middle
  // dimension, such as a padded batch pooled over its sequence. `load_side_by_side` then reads
  // the rows' elements at a position together (the CPU reductions' vectorizable loop).
  template <int kRows>
  PP_HD bool side_by_side(const Cursor (&c)[kRows]) const {
    for (int r = 0; r < kRows; ++r) {
      if (c[r].in != c[0].in + r || c[r].mask != c[0].mask) return false;
    }
    return true;
  }
  template <int kRows>
  PP_HD void load_side_by_side(const Cursor& first, int64_t pos, Value (&values)[kRows]) const {
    const In* x = in + first.in + pos * in_rows.stride_len;
    const bool kept = mask == nullptr || mask[first.mask + pos * mask_rows.stride_len];
    PP_UNROLL
    for (int r = 0; r < kRows; ++r) values[r] = kept ? Traits::element(x[r]) : M::identity();
  }
  // The elements of rows first, first + 1, ... at `pos`, or nullptr where the position is
  // masked out (a mean's fold: its rows share one count, so it sums the elements alone).
  PP_HD const In* kept_side_by_side(const Cursor& first, int64_t pos) const {
    if (mask != nullptr && !mask[first.mask + pos * mask_rows.stride_len]) return nullptr;
    return in + first.in + pos * in_rows.stride_len;
  }
  // load() in two steps, for a kernel that issues its loads before it uses them: the element as
  // stored (`element` converts it), and whether the mask keeps its position.
  PP_HD const In* address(const Cursor& c, int64_t pos) const { return in + c.in + pos * in_rows.stride_len; }
  PP_HD bool kept(const Cursor& c, int64_t pos) const {
    return mask == nullptr || mask[c.mask + pos * mask_rows.stride_len];
  }
  // Whether every kRows neighbouring rows from a multiple of kRows lie side by side, in words of
  // kRows elements that wide loads read at every position (vector_io.h: the innermost row
  // dimension unit-strided and a multiple of kRows long, every other stride and the input
  // aligned to the word's accesses), sharing their mask element: the features of a (T, F)
  // tensor reduced along T, a padded (B, T, D) batch pooled over T with a (B, T, 1) mask.
  template <int kRows>
  PP_HD bool rows_in_words() const {
    constexpr int64_t kAlign = detail::wide_bytes<kRows, In>();
    if (kAlign == 0 || in_rows.ndim == 0) return false;
    const int inner = in_rows.ndim - 1;
    if (in_rows.strides[inner] != 1 || in_rows.sizes[inner] % kRows != 0) return false;
    if (mask != nullptr && mask_rows.strides[inner] != 0) return false;
    if (reinterpret_cast<uintptr_t>(in) % kAlign != 0) return false;
    const auto aligned = [](int64_t stride) { return stride * static_cast<int64_t>(sizeof(In)) % kAlign == 0; };
    for (int d = 0; d < inner; ++d) {
      if (!aligned(in_rows.strides[d])) return false;
    }
    return aligned(in_rows.stride_len);
  }
  // The row's elements as one array (no mask, unit stride), which a kernel may then read
  // directly, and how an element read so enters the monoid; null when they are not.
  using Input = In;
  PP_HD bool rows_contiguous() const { return mask == nullptr && in_rows.stride_len == 1; }
  PP_HD const In* contiguous_row(const Cursor& c) const { return rows_contiguous() ? in + c.in : nullptr; }
  PP_HD Value element(const In& x) const { return Traits::element(x); }
  // Only segment totals are written.
  PP_HD void store(const Cursor&, int64_t, const Value&) const {}
  PP_HD void store_final(int64_t row, int64_t segment, const Value& v) const {
    store_final_in_row(final_row(row), segment, v);
  }
  // The same in two steps, for a kernel that writes many segments of one row: the row's
  // outputs (a decomposition of the row index, divisions) found once.
  PP_HD int64_t final_row(int64_t row) const { return out_rows.row_offset(row); }
  // For rows in words (rows_in_words): row first + r's outputs are final_row(first) + r times
  // this (the rows differ in their innermost index alone).
  PP_HD int64_t final_row_step() const { return out_rows.ndim > 0 ? out_rows.strides[out_rows.ndim - 1] : 0; }
  PP_HD void store_final_in_row(int64_t final_row, int64_t segment, const Value& v) const {
    out[final_row + segment * out_rows.stride_len] = static_cast<Out>(Traits::result(v));
  }

  template <int N>
  PP_HD bool load_run(const Cursor& c, int64_t pos, Value (&values)[N]) const {
    In raw[N];
    if (mask != nullptr || in_rows.stride_len != 1 || !load_wide<N>(in + c.in + pos, raw)) return false;
    PP_UNROLL
    for (int i = 0; i < N; ++i) values[i] = Traits::element(raw[i]);
    return true;
  }
  // The first position from `pos` where load_run<N> takes wide loads (its runs' addresses
  // aligned), or -1 when it never does (a mask, a strided dimension, a misaligned element).
  template <int N>
  PP_HD int64_t first_wide_position(const Cursor& c, int64_t pos) const {
    constexpr int kWide = detail::wide_bytes<N, In>();
    if constexpr (kWide == 0) {
      return -1;
    } else {
      if (mask != nullptr || in_rows.stride_len != 1) return -1;
      const uintptr_t misaligned = reinterpret_cast<uintptr_t>(in + c.in + pos) % kWide;
      if (misaligned % sizeof(In) != 0) return -1;
      return pos + static_cast<int64_t>((kWide - misaligned) % kWide / sizeof(In));
    }
  }
  template <int N>
  PP_HD bool store_run(const Cursor&, int64_t, const Value (&)[N]) const {
    return true;  // nothing to store per element
  }
};

}  // namespace parprims
