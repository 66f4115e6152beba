// The CPU ops of the affine recurrences: affine_scan, matrix_affine_scan, their exclusive
// forms and affine_scan's one-scan backward. Each checks and allocates through host/affine_host.h, dispatches on the dtype
// (host/affine_dispatch.h) onto the CPU engine (cpu/engine.h). Schemas: csrc/registration.cpp.
#include <torch/library.h>

#include "../host/affine_dispatch.h"
#include "../host/affine_host.h"
#include "engine_cpu.h"

namespace parprims::cpu {
namespace {

using OptTensor = c10::optional<at::Tensor>;

template <bool kExclusive>
std::tuple<at::Tensor, at::Tensor> affine_scan_op(const at::Tensor& a, const at::Tensor& b, int64_t dim,
                                               const OptTensor& initial_state, const OptTensor& offsets,
                                               bool reverse, bool log_gates) {
  const auto c = host::prepare_affine_scan(a, b, dim, initial_state, offsets, reverse, log_gates, kExclusive);
  if (c.launch) host::dispatch_affine(c.call, Engine{});
  return c.result();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> affine_scan_backward_op(
    const at::Tensor& a, const at::Tensor& h, const at::Tensor& grad_h, const OptTensor& grad_final,
    const OptTensor& initial_state, int64_t dim, bool reverse, bool log_gates) {
  const auto c = host::prepare_affine_scan_backward(a, h, grad_h, grad_final, initial_state, dim, reverse, log_gates);
  if (c.launch) host::dispatch_affine_grad(c.call, Engine{});
  return c.result();
}

template <bool kExclusive>
std::tuple<at::Tensor, at::Tensor> matrix_affine_scan_op(const at::Tensor& A, const at::Tensor& b, int64_t dim,
                                                      const OptTensor& initial_state,
                                                      const OptTensor& offsets, bool reverse) {
  const auto c = host::prepare_matrix_affine_scan(A, b, dim, initial_state, offsets, reverse, kExclusive);
  if (c.launch) host::dispatch_matrix_affine(c.call, Engine{});
  return c.result();
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) {
  m.impl("affine_scan", &affine_scan_op<false>);
  m.impl("_affine_scan_exclusive", &affine_scan_op<true>);
  m.impl("_affine_scan_backward", &affine_scan_backward_op);
  m.impl("matrix_affine_scan", &matrix_affine_scan_op<false>);
  m.impl("_matrix_affine_scan_exclusive", &matrix_affine_scan_op<true>);
}

}  // namespace parprims::cpu
