// The CPU ops of the scan family: scan, segmented_scan, _scan_with_indices, _scan_bicyclic,
// _scan_extreme_backward.
// host/scan_registration.h checks and allocates (host/scan_host.h); each runner here
// dispatches on the dtype (host/scan_dispatch.h) onto the CPU engine (cpu/engine.h).
// Schemas: csrc/registration.cpp.
#include <ATen/AccumulateType.h>
#include <torch/library.h>

#include "../host/scan_dispatch.h"
#include "../host/scan_registration.h"
#include "engine_cpu.h"

namespace parprims::cpu {
namespace {

// host::Accumulate spells out at::acc_type, whose header stays out of the CUDA units.
template <class T>
constexpr bool same_as_acc_type() {
  return std::is_same_v<typename host::Accumulate<T, false>::type, at::acc_type<T, false>> &&
         std::is_same_v<typename host::Accumulate<T, true>::type, at::acc_type<T, true>>;
}
static_assert(same_as_acc_type<at::Half>() && same_as_acc_type<at::BFloat16>() && same_as_acc_type<float>() &&
              same_as_acc_type<double>() && same_as_acc_type<c10::complex<float>>() &&
              same_as_acc_type<c10::complex<double>>());

void run_scan(const host::PreparedScan& c) {
  switch (c.op) {
    case host::ScanOp::kAdd: return host::dispatch_scan_add(c.call, Engine{});
    case host::ScanOp::kMul: return host::dispatch_scan_mul(c.call, Engine{});
    case host::ScanOp::kMax: return host::dispatch_scan_max(c.call, Engine{});
    case host::ScanOp::kMin: return host::dispatch_scan_min(c.call, Engine{});
    case host::ScanOp::kLogAddExp: return host::dispatch_scan_logaddexp(c.call, Engine{});
  }
}

void run_scan_with_indices(const host::PreparedScanWithIndices& c) {
  host::dispatch_scan_with_indices(c.call, Engine{});
}

void run_scan_bicyclic(const host::PreparedBicyclic& c) { host::dispatch_scan_bicyclic(c.call, Engine{}); }

void run_scan_extreme_grad(const host::PreparedExtremeScanGrad& c) {
  host::dispatch_scan_extreme_grad(c.call, Engine{});
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) {
  host::ScanOps<&run_scan, &run_scan_with_indices, &run_scan_bicyclic, &run_scan_extreme_grad>::register_kernels(m);
}

}  // namespace parprims::cpu
