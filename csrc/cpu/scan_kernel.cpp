// CPU kernels of scan, segmented_scan and their helpers.
#include <torch/library.h>

#include "../host/scan_dispatch.h"
#include "../host/scan_ops.h"
#include "engine_cpu.h"

namespace parprims::cpu {
namespace {

using host::ScanBackend;

const ScanBackend& backend() {
  static const ScanBackend be{
      [](const at::Tensor& i, const at::Tensor& o, int64_t d, const ScanGeometry& g) {
        host::dispatch_scan_add(i, o, d, g, Engine{});
      },
      [](const at::Tensor& i, const at::Tensor& o, int64_t d, const ScanGeometry& g) {
        host::dispatch_scan_mul(i, o, d, g, Engine{});
      },
      [](const at::Tensor& i, const at::Tensor& o, int64_t d, const ScanGeometry& g) {
        host::dispatch_scan_max(i, o, d, g, Engine{});
      },
      [](const at::Tensor& i, const at::Tensor& o, int64_t d, const ScanGeometry& g) {
        host::dispatch_scan_min(i, o, d, g, Engine{});
      },
      [](const at::Tensor& i, const at::Tensor& o, int64_t d, const ScanGeometry& g) {
        host::dispatch_scan_logaddexp(i, o, d, g, Engine{});
      },
      [](bool is_max, const at::Tensor& i, const at::Tensor& o, const at::Tensor& idx, int64_t d,
         const ScanGeometry& g) { host::dispatch_scan_arg(is_max, i, o, idx, d, g, Engine{}); },
      [](const at::Tensor& p, const at::Tensor& q, const at::Tensor& po, const at::Tensor& qo,
         int64_t d, const ScanGeometry& g) {
        host::dispatch_scan_bicyclic(p, q, po, qo, d, g, Engine{});
      },
      /*always_validate_offsets=*/true};
  return be;
}

at::Tensor scan_op(const at::Tensor& x, int64_t dim, c10::string_view op, bool exclusive, bool reverse) {
  return host::scan(backend(), x, c10::nullopt, dim, std::string(op), exclusive, reverse);
}

at::Tensor segmented_scan(const at::Tensor& x, const at::Tensor& offsets, int64_t dim,
                          c10::string_view op, bool exclusive, bool reverse) {
  return host::scan(backend(), x, offsets, dim, std::string(op), exclusive, reverse);
}

std::tuple<at::Tensor, at::Tensor> scan_with_indices(const at::Tensor& x,
                                                     const c10::optional<at::Tensor>& offsets,
                                                     int64_t dim, c10::string_view op,
                                                     bool exclusive, bool reverse) {
  return host::scan_with_indices(backend(), x, offsets, dim, std::string(op), exclusive, reverse);
}

std::tuple<at::Tensor, at::Tensor> scan_bicyclic(const at::Tensor& p, const at::Tensor& q,
                                                 const c10::optional<at::Tensor>& offsets,
                                                 int64_t dim, bool exclusive, bool reverse) {
  return host::scan_bicyclic(backend(), p, q, offsets, dim, exclusive, reverse);
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) {
  m.impl("scan", &scan_op);
  m.impl("segmented_scan", &segmented_scan);
  m.impl("_scan_with_indices", &scan_with_indices);
  m.impl("_scan_bicyclic", &scan_bicyclic);
}

}  // namespace parprims::cpu
