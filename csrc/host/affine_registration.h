// The affine recurrences' kernel table, shared by the CPU and CUDA registrations: every op is
// device-independent host code (host/affine_host.cpp) around one device step per prepared call
// (cpu/affine_kernel.cpp, cuda/affine_kernel.cpp), called only when there is something to scan.
#pragma once

#include <torch/library.h>

#include <optional>
#include <tuple>

#include "affine_host.h"

namespace parprims::host {

template <void (*Affine)(const PreparedAffine&), void (*AffineGrad)(const PreparedAffineGrad&),
          void (*MatrixAffine)(const PreparedMatrixAffine&)>
struct AffineOps {
  using OptTensor = std::optional<at::Tensor>;

  template <bool kExclusive>
  static std::tuple<at::Tensor, at::Tensor> affine_scan_op(const at::Tensor& a, const at::Tensor& b, int64_t dim,
                                                           const OptTensor& initial_state, const OptTensor& offsets,
                                                           bool reverse, bool log_gates) {
    const auto c = prepare_affine_scan(a, b, dim, initial_state, offsets, reverse, log_gates, kExclusive);
    if (c.launch) Affine(c);
    return c.result();
  }

  static std::tuple<at::Tensor, at::Tensor, at::Tensor> affine_scan_backward_op(
      const at::Tensor& a, const at::Tensor& h, const at::Tensor& grad_h, const OptTensor& grad_final,
      const OptTensor& initial_state, int64_t dim, bool reverse, bool log_gates) {
    const auto c = prepare_affine_scan_backward(a, h, grad_h, grad_final, initial_state, dim, reverse, log_gates);
    if (c.launch) AffineGrad(c);
    return c.result();
  }

  // The `_into` forms: write into the caller's tensors (a view of a larger one: the sequence-
  // parallel pipeline's channel groups) and return the rest.
  static at::Tensor affine_scan_into_op(const at::Tensor& a, const at::Tensor& b, int64_t dim,
                                        const OptTensor& initial_state, const OptTensor& offsets, bool reverse,
                                        bool log_gates, const at::Tensor& h) {
    const auto c = prepare_affine_scan(a, b, dim, initial_state, offsets, reverse, log_gates, false, h);
    if (c.launch) Affine(c);
    return c.final_state;
  }

  static at::Tensor affine_scan_backward_into_op(const at::Tensor& a, const at::Tensor& h, const at::Tensor& grad_h,
                                                 const OptTensor& grad_final, const OptTensor& initial_state,
                                                 int64_t dim, bool reverse, bool log_gates, const at::Tensor& grad_a,
                                                 const at::Tensor& grad_b) {
    const auto c = prepare_affine_scan_backward(a, h, grad_h, grad_final, initial_state, dim, reverse, log_gates,
                                                grad_a, grad_b);
    if (c.launch) AffineGrad(c);
    return c.grad_initial;
  }

  template <bool kExclusive>
  static std::tuple<at::Tensor, at::Tensor> matrix_affine_scan_op(const at::Tensor& A, const at::Tensor& b,
                                                                  int64_t dim, const OptTensor& initial_state,
                                                                  const OptTensor& offsets, bool reverse) {
    const auto c = prepare_matrix_affine_scan(A, b, dim, initial_state, offsets, reverse, kExclusive);
    if (c.launch) MatrixAffine(c);
    return c.result();
  }

  // Registers every affine op for the library's dispatch key (schemas: registration.cpp).
  static void register_kernels(torch::Library& m) {
    m.impl("affine_scan", &affine_scan_op<false>);
    m.impl("_affine_scan_exclusive", &affine_scan_op<true>);
    m.impl("_affine_scan_backward", &affine_scan_backward_op);
    m.impl("_affine_scan_into", &affine_scan_into_op);
    m.impl("_affine_scan_backward_into", &affine_scan_backward_into_op);
    m.impl("matrix_affine_scan", &matrix_affine_scan_op<false>);
    m.impl("_matrix_affine_scan_exclusive", &matrix_affine_scan_op<true>);
  }
};

}  // namespace parprims::host
