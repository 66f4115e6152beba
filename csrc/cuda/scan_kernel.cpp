// The CUDA ops of the scan family: scan, segmented_scan, _scan_with_indices, _scan_bicyclic,
// _scan_extreme_backward.
// host/scan_registration.h checks and allocates (host/scan_host.h); each runner here calls its
// operator's kernel unit (scan_instantiations.h: the dtype dispatch onto the CUDA engine,
// cuda/engine/engine.cuh) in a LaunchScope. Host code only. Schemas: csrc/registration.cpp.
#include <torch/library.h>

#include "../host/scan_registration.h"
#include "launch_scope.h"
#include "scan_instantiations.h"

namespace parprims::cuda {
namespace {

void run_scan(const host::PreparedScan& c) {
  const LaunchScope scope(c.in);
  const auto& ctx = scope.context();
  switch (c.op) {
    case host::ScanOp::kAdd: return scan_add(c.call, ctx);
    case host::ScanOp::kMul: return scan_mul(c.call, ctx);
    case host::ScanOp::kMax: return scan_max(c.call, ctx);
    case host::ScanOp::kMin: return scan_min(c.call, ctx);
    case host::ScanOp::kLogAddExp: return scan_logaddexp(c.call, ctx);
  }
}

void run_scan_with_indices(const host::PreparedScanWithIndices& c) {
  const LaunchScope scope(c.in);
  scan_with_indices(c.call, scope.context());
}

void run_scan_bicyclic(const host::PreparedBicyclic& c) {
  const LaunchScope scope(c.p_in);
  scan_bicyclic(c.call, scope.context());
}

void run_scan_extreme_grad(const host::PreparedExtremeScanGrad& c) {
  const LaunchScope scope(c.out);
  scan_extreme_grad(c.call, scope.context());
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) {
  host::ScanOps<&run_scan, &run_scan_with_indices, &run_scan_bicyclic, &run_scan_extreme_grad>::register_kernels(m);
}

}  // namespace parprims::cuda
