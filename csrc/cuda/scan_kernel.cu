// CUDA registrations of scan, segmented_scan and their helpers.
#include <torch/library.h>

#include "../host/scan_ops.h"
#include "entry_points.h"

namespace parprims::cuda {
namespace {

const host::ScanBackend& backend() {
  static const host::ScanBackend be{&scan_add, &scan_mul, &scan_max, &scan_min, &scan_logaddexp,
                                    &scan_arg, &scan_bicyclic, /*always_validate_offsets=*/false};
  return be;
}

at::Tensor scan_op(const at::Tensor& x, int64_t dim, c10::string_view op, bool exclusive, bool reverse) {
  return host::scan(backend(), x, c10::nullopt, dim, std::string(op), exclusive, reverse);
}

at::Tensor segmented_scan_op(const at::Tensor& x, const at::Tensor& offsets, int64_t dim,
                             c10::string_view op, bool exclusive, bool reverse) {
  return host::scan(backend(), x, offsets, dim, std::string(op), exclusive, reverse);
}

std::tuple<at::Tensor, at::Tensor> scan_with_indices_op(const at::Tensor& x,
                                                        const c10::optional<at::Tensor>& offsets,
                                                        int64_t dim, c10::string_view op,
                                                        bool exclusive, bool reverse) {
  return host::scan_with_indices(backend(), x, offsets, dim, std::string(op), exclusive, reverse);
}

std::tuple<at::Tensor, at::Tensor> scan_bicyclic_op(const at::Tensor& p, const at::Tensor& q,
                                                    const c10::optional<at::Tensor>& offsets,
                                                    int64_t dim, bool exclusive, bool reverse) {
  return host::scan_bicyclic(backend(), p, q, offsets, dim, exclusive, reverse);
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) {
  m.impl("scan", &scan_op);
  m.impl("segmented_scan", &segmented_scan_op);
  m.impl("_scan_with_indices", &scan_with_indices_op);
  m.impl("_scan_bicyclic", &scan_bicyclic_op);
}

}  // namespace parprims::cuda
