// CPU kernels of affine_scan, matrix_affine_scan and their exclusive forms.
#include <torch/library.h>

#include "../host/affine_dispatch.h"
#include "engine_cpu.h"

namespace parprims::cpu {
namespace {

const host::AffineBackend& backend() {
  static const host::AffineBackend be{
      [](const host::AffineArgs& args, const ScanGeometry& g) { host::dispatch_affine(args, g, Engine{}); },
      [](const host::MatrixAffineArgs& args, const ScanGeometry& g) {
        host::dispatch_matrix_affine(args, g, Engine{});
      },
      /*always_validate_offsets=*/true};
  return be;
}

std::tuple<at::Tensor, at::Tensor> affine_scan(const at::Tensor& a, const at::Tensor& b, int64_t dim,
                                               const c10::optional<at::Tensor>& initial_state,
                                               const c10::optional<at::Tensor>& offsets,
                                               bool reverse, bool log_gates) {
  return host::affine_scan(backend(), a, b, dim, initial_state, offsets, reverse, log_gates, false);
}

std::tuple<at::Tensor, at::Tensor> affine_scan_exclusive(const at::Tensor& a, const at::Tensor& b,
                                                         int64_t dim,
                                                         const c10::optional<at::Tensor>& initial_state,
                                                         const c10::optional<at::Tensor>& offsets,
                                                         bool reverse, bool log_gates) {
  return host::affine_scan(backend(), a, b, dim, initial_state, offsets, reverse, log_gates, true);
}

std::tuple<at::Tensor, at::Tensor> matrix_affine_scan(const at::Tensor& A, const at::Tensor& b,
                                                      int64_t dim,
                                                      const c10::optional<at::Tensor>& initial_state,
                                                      const c10::optional<at::Tensor>& offsets,
                                                      bool reverse) {
  return host::matrix_affine_scan(backend(), A, b, dim, initial_state, offsets, reverse, false);
}

std::tuple<at::Tensor, at::Tensor> matrix_affine_scan_exclusive(
    const at::Tensor& A, const at::Tensor& b, int64_t dim,
    const c10::optional<at::Tensor>& initial_state, const c10::optional<at::Tensor>& offsets,
    bool reverse) {
  return host::matrix_affine_scan(backend(), A, b, dim, initial_state, offsets, reverse, true);
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) {
  m.impl("affine_scan", &affine_scan);
  m.impl("_affine_scan_exclusive", &affine_scan_exclusive);
  m.impl("matrix_affine_scan", &matrix_affine_scan);
  m.impl("_matrix_affine_scan_exclusive", &matrix_affine_scan_exclusive);
}

}  // namespace parprims::cpu
