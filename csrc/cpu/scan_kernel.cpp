// CPU kernels of scan, segmented_scan and their helpers.
#include <torch/library.h>

#include "../host/register.h"
#include "../host/scan_dispatch.h"
#include "engine_cpu.h"

namespace parprims::cpu {
namespace {

const host::ScanBackend& backend() {
  static const host::ScanBackend be{
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

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) { host::ScanEntryPoints<&backend>::define(m); }

}  // namespace parprims::cpu
