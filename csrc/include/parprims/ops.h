// C++ API of torch_parprims for LibTorch programs.
//
// Header-only: every function calls its op through the PyTorch dispatcher, so the same CPU and
// CUDA kernels (and autograd, where it is registered) run as from Python. The ops must be
// registered in the process: link the `parprims` library (built by CMakeLists.txt) so that it
// is loaded, or load torch_parprims' `_C` module with dlopen before the first call.
//
//   #include <parprims/ops.h>
//   at::Tensor y = parprims::scan(x, /*dim=*/-1, "max");
//
// Every function throws c10::Error (a message naming the bad argument) on invalid input.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Scalar.h>
#include <c10/core/SymInt.h>
#include <c10/util/string_view.h>

#include <optional>
#include <tuple>

namespace parprims {

namespace detail {

// The typed handle of `parprims::<name>`, looked up once per signature (thread-safe static).
template <class Signature>
c10::TypedOperatorHandle<Signature> op_handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").template typed<Signature>();
}

}  // namespace detail

/// Inclusive (or exclusive) prefix scan of `op` along `dim`.
///
/// `op` is one of "add", "mul", "max", "min", "logaddexp". Exclusive scans put the identity
/// first (last when `reverse`); `reverse` scans from the end. The output has `x`'s shape; its
/// dtype is int64 for "add" over integer or bool inputs (as at::cumsum), `x`'s otherwise.
/// NaN propagates, through max and min too.
inline at::Tensor scan(const at::Tensor& x, int64_t dim, c10::string_view op = "add",
                       bool exclusive = false, bool reverse = false) {
  using Sig = at::Tensor(const at::Tensor&, int64_t, c10::string_view, bool, bool);
  static const auto handle = detail::op_handle<Sig>("parprims::scan");
  return handle.call(x, dim, op, exclusive, reverse);
}

/// The scan of `scan()` restarting at every packed-sequence start.
///
/// `offsets` is a 1-D int32/int64 tensor of length S+1 on `x`'s device (flash-attn's
/// cu_seqlens): offsets[0] == 0, non-decreasing, offsets[S] == x.size(dim); sequence k covers
/// [offsets[k], offsets[k+1]) along `dim`. Empty sequences are allowed.
inline at::Tensor segmented_scan(const at::Tensor& x, const at::Tensor& offsets, int64_t dim = 0,
                                 c10::string_view op = "add", bool exclusive = false,
                                 bool reverse = false) {
  using Sig = at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, c10::string_view, bool, bool);
  static const auto handle = detail::op_handle<Sig>("parprims::segmented_scan");
  return handle.call(x, offsets, dim, op, exclusive, reverse);
}

/// The elementwise linear recurrence h_t = a_t * h_{t-1} + b_t along `dim`.
///
/// `a` is broadcastable to `b` (given as log a when `log_gates`); real or complex.
/// `initial_state` (h_{-1}, zeros when absent) has `b`'s shape without `dim`, or
/// (S, *that shape) with `offsets`. `reverse` runs h_t = a_t * h_{t+1} + b_t. Returns
/// (h, final_state); states are float32 for half inputs.
inline std::tuple<at::Tensor, at::Tensor> affine_scan(
    const at::Tensor& a, const at::Tensor& b, int64_t dim = -1,
    const std::optional<at::Tensor>& initial_state = std::nullopt,
    const std::optional<at::Tensor>& offsets = std::nullopt, bool reverse = false,
    bool log_gates = false) {
  using Sig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, int64_t,
                                                 const std::optional<at::Tensor>&,
                                                 const std::optional<at::Tensor>&, bool, bool);
  static const auto handle = detail::op_handle<Sig>("parprims::affine_scan");
  return handle.call(a, b, dim, initial_state, offsets, reverse, log_gates);
}

/// The dense linear recurrence h_t = A_t h_{t-1} + b_t with small states (d <= 8).
///
/// `A` is (..., L, d, d), its leading dims broadcastable to `b`'s; `b` is (..., L, d), float32
/// or float64. `dim` indexes `b` over all its dims, as in Python, and may not name the last
/// (state) dimension: the default -2 is the L of (..., L, d). `initial_state` is `b`'s shape
/// without `dim` (that is (..., d)), or (S, *that shape) with `offsets`. Returns
/// (h, final_state).
inline std::tuple<at::Tensor, at::Tensor> matrix_affine_scan(
    const at::Tensor& A, const at::Tensor& b, int64_t dim = -2,
    const std::optional<at::Tensor>& initial_state = std::nullopt,
    const std::optional<at::Tensor>& offsets = std::nullopt, bool reverse = false) {
  using Sig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, int64_t,
                                                 const std::optional<at::Tensor>&,
                                                 const std::optional<at::Tensor>&, bool);
  static const auto handle = detail::op_handle<Sig>("parprims::matrix_affine_scan");
  return handle.call(A, b, dim, initial_state, offsets, reverse);
}

/// Stable stream compaction, exact size: the elements of `x` where `mask` (x's shape), or the
/// slices along `dim` where a 1-D `mask` (of x.size(dim)) is true. Returns (values, indices);
/// indices (int64 source positions) is empty unless `return_indices`. Reads the count back to
/// the host (a sync on CUDA), like x[mask].
inline std::tuple<at::Tensor, at::Tensor> compact(const at::Tensor& x, const at::Tensor& mask, int64_t dim = 0,
                                                  bool return_indices = false) {
  using Sig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, int64_t, bool);
  static const auto handle = detail::op_handle<Sig>("parprims::compact");
  return handle.call(x, mask, dim, return_indices);
}

/// The fixed-capacity compaction, with no host synchronization: (values, count, indices) with
/// `capacity` slots (past the count: `fill_value`, indices -1) and `count` a 0-d int64 tensor
/// on x's device (the true count, even when above the capacity).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> compact_capacity(const at::Tensor& x, const at::Tensor& mask,
                                                                       int64_t capacity, int64_t dim = 0,
                                                                       const at::Scalar& fill_value = 0,
                                                                       bool return_indices = false) {
  using Sig = std::tuple<at::Tensor, at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, int64_t, int64_t,
                                                             const at::Scalar&, bool);
  static const auto handle = detail::op_handle<Sig>("parprims::compact_capacity");
  return handle.call(x, mask, capacity, dim, fill_value, return_indices);
}

/// One reduction per packed sequence along `dim`: `op` is "sum", "mean", "max", "min", "prod"
/// or "logsumexp"; the output has x's shape with `dim` of size S (offsets.size(0) - 1). An
/// empty sequence gives the op's identity (mean: 0); sum and prod of integers give int64.
inline at::Tensor segment_reduce(const at::Tensor& x, const at::Tensor& offsets, c10::string_view op,
                                 int64_t dim = 0) {
  using Sig = at::Tensor(const at::Tensor&, const at::Tensor&, c10::string_view, int64_t);
  static const auto handle = detail::op_handle<Sig>("parprims::segment_reduce");
  return handle.call(x, offsets, op, dim);
}

/// The same reductions along `dim`, over the elements where `mask` (bool, broadcastable to x)
/// is true; an all-masked slice gives the identity (mean: 0).
inline at::Tensor reduce(const at::Tensor& x, int64_t dim, c10::string_view op,
                         const std::optional<at::Tensor>& mask = std::nullopt, bool keepdim = false) {
  using Sig = at::Tensor(const at::Tensor&, int64_t, c10::string_view, const std::optional<at::Tensor>&, bool);
  static const auto handle = detail::op_handle<Sig>("parprims::reduce");
  return handle.call(x, dim, op, mask, keepdim);
}

/// Counts (int64, exact) or weight sums of x in `bins` equal-width bins over [lo, hi] (hi in the
/// last bin; values outside and NaN skipped): (bins,), or (S, bins) per sequence with offsets.
inline at::Tensor histogram(const at::Tensor& x, int64_t bins, double lo, double hi,
                            const std::optional<at::Tensor>& weights = std::nullopt,
                            const std::optional<at::Tensor>& offsets = std::nullopt) {
  using Sig = at::Tensor(const at::Tensor&, int64_t, double, double, const std::optional<at::Tensor>&,
                         const std::optional<at::Tensor>&);
  static const auto handle = detail::op_handle<Sig>("parprims::histogram");
  return handle.call(x, bins, lo, hi, weights, offsets);
}

/// Validates packed-sequence `offsets` for data of length `total`: 1-D int32/int64,
/// offsets[0] == 0, non-decreasing, offsets[S] == total. Throws c10::Error naming what is
/// wrong. Reads the tensor back to the host (a sync on CUDA).
inline void check_offsets(const at::Tensor& offsets, int64_t total) {
  using Sig = void(const at::Tensor&, c10::SymInt);
  static const auto handle = detail::op_handle<Sig>("parprims::check_offsets");
  handle.call(offsets, c10::SymInt(total));
}

/// Validates offsets on every CUDA call when `enabled` (one host sync per call); CPU ops
/// always validate. The environment variable PARPRIMS_CHECKS=1 turns this on at load.
inline void set_checks(bool enabled) {
  static const auto handle = detail::op_handle<void(bool)>("parprims::_set_checks");
  handle.call(enabled);
}

/// Whether CUDA ops validate offsets on every call (see set_checks()).
inline bool checks_enabled() {
  static const auto handle = detail::op_handle<bool()>("parprims::_checks_enabled");
  return handle.call();
}

}  // namespace parprims
