// Host side of the affine recurrences (affine_scan, matrix_affine_scan and their exclusive
// forms), shared by the CPU and CUDA kernel files: checks, broadcasting (as strided views,
// never materialized), state shapes, output allocation, geometry. Each prepare_* returns a
// prepared call: the tensors, and the plain kernel call (host/affine_call.h) for a device's
// dtype dispatch (host/affine_dispatch.h). Device-independent.
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

#include "affine_call.h"
#include "common.h"

namespace parprims::host {

// The elementwise recurrence: `a` expanded to `b`'s shape; states contiguous (segments, rows).
struct PreparedAffine {
  at::Tensor a, b, h;
  at::Tensor initial;      // undefined for zeros
  at::Tensor final_state;  // always allocated; every entry written unless a sequence is empty
  at::Tensor offsets;  // contiguous, or undefined: what the geometry points into
  bool launch = false;  // false when b has no elements
  AffineCall call;      // set when `launch`
  std::tuple<at::Tensor, at::Tensor> result() const { return {h, final_state}; }
};
// `h_out`: where to write h (the `_into` form: any strides, checked by check_output), or
// undefined to allocate it like b.
PreparedAffine prepare_affine_scan(const at::Tensor& a, const at::Tensor& b, int64_t dim,
                                   const c10::optional<at::Tensor>& initial_state,
                                   const c10::optional<at::Tensor>& offsets, bool reverse,
                                   bool log_gates, bool exclusive, const at::Tensor& h_out = at::Tensor());

// The backward of affine_scan without packed sequences, in one scan (AffineGradProblem): `a`
// expanded to h's shape, h the forward's output; grad_a in h's shape (the caller sums it to
// a's), grad_b, grad_initial (rows, in the state dtype).
struct PreparedAffineGrad {
  at::Tensor a, h, grad_h;
  at::Tensor grad_final, initial;  // undefined for zeros
  at::Tensor grad_a, grad_b, grad_initial;
  bool launch = false;
  AffineGradCall call;  // set when `launch`
  std::tuple<at::Tensor, at::Tensor, at::Tensor> result() const { return {grad_a, grad_b, grad_initial}; }
};
// `grad_a_out`, `grad_b_out`: where to write those two (the `_into` form), or undefined to
// allocate them like h.
PreparedAffineGrad prepare_affine_scan_backward(const at::Tensor& a, const at::Tensor& h, const at::Tensor& grad_h,
                                                const c10::optional<at::Tensor>& grad_final,
                                                const c10::optional<at::Tensor>& initial_state, int64_t dim,
                                                bool reverse, bool log_gates,
                                                const at::Tensor& grad_a_out = at::Tensor(),
                                                const at::Tensor& grad_b_out = at::Tensor());

// The matrix form: A (..., L, d, d) expanded to b's leading dims, b and h (..., L, d). `dim`
// indexes b (all of its dims, as every op counts them) and is never its last, state dim.
struct PreparedMatrixAffine {
  at::Tensor A, b, h, initial, final_state;
  at::Tensor offsets;  // contiguous, or undefined: what the geometry points into
  bool launch = false;
  MatrixAffineCall call;  // set when `launch`
  std::tuple<at::Tensor, at::Tensor> result() const { return {h, final_state}; }
};
PreparedMatrixAffine prepare_matrix_affine_scan(const at::Tensor& A, const at::Tensor& b, int64_t dim,
                                                const c10::optional<at::Tensor>& initial_state,
                                                const c10::optional<at::Tensor>& offsets,
                                                bool reverse, bool exclusive);

// The dtype of states for inputs of dtype `t`: float32 for half types, `t` otherwise.
at::ScalarType state_dtype(at::ScalarType t);

}  // namespace parprims::host
