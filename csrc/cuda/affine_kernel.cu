// CUDA registrations of affine_scan, matrix_affine_scan and their exclusive forms.
#include <torch/library.h>

#include "../host/affine_ops.h"
#include "entry_points.h"

namespace parprims::cuda {
namespace {

const host::AffineBackend& backend() {
  static const host::AffineBackend be{&affine, &matrix_affine, /*always_validate_offsets=*/false};
  return be;
}

using OptTensor = c10::optional<at::Tensor>;

std::tuple<at::Tensor, at::Tensor> affine_scan_op(const at::Tensor& a, const at::Tensor& b, int64_t dim,
                                                  const OptTensor& initial_state, const OptTensor& offsets,
                                                  bool reverse, bool log_gates) {
  return host::affine_scan(backend(), a, b, dim, initial_state, offsets, reverse, log_gates, false);
}

std::tuple<at::Tensor, at::Tensor> affine_scan_exclusive_op(const at::Tensor& a, const at::Tensor& b,
                                                            int64_t dim, const OptTensor& initial_state,
                                                            const OptTensor& offsets, bool reverse,
                                                            bool log_gates) {
  return host::affine_scan(backend(), a, b, dim, initial_state, offsets, reverse, log_gates, true);
}

std::tuple<at::Tensor, at::Tensor> matrix_affine_scan_op(const at::Tensor& A, const at::Tensor& b, int64_t dim,
                                                         const OptTensor& initial_state,
                                                         const OptTensor& offsets, bool reverse) {
  return host::matrix_affine_scan(backend(), A, b, dim, initial_state, offsets, reverse, false);
}

std::tuple<at::Tensor, at::Tensor> matrix_affine_scan_exclusive_op(const at::Tensor& A, const at::Tensor& b,
                                                                   int64_t dim, const OptTensor& initial_state,
                                                                   const OptTensor& offsets, bool reverse) {
  return host::matrix_affine_scan(backend(), A, b, dim, initial_state, offsets, reverse, true);
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) {
  m.impl("affine_scan", &affine_scan_op);
  m.impl("_affine_scan_exclusive", &affine_scan_exclusive_op);
  m.impl("matrix_affine_scan", &matrix_affine_scan_op);
  m.impl("_matrix_affine_scan_exclusive", &matrix_affine_scan_exclusive_op);
}

}  // namespace parprims::cuda
