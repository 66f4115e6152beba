// The CPU ops of the scan family: scan, segmented_scan, _scan_with_indices, _scan_bicyclic.
// Each checks and allocates through host/scan_host.h, dispatches on the dtype
// (host/scan_dispatch.h) onto the CPU engine (cpu/engine.h). Schemas: csrc/registration.cpp.
#include <ATen/AccumulateType.h>
#include <torch/library.h>

#include "../host/scan_dispatch.h"
#include "../host/scan_host.h"
#include "engine_cpu.h"

namespace parprims::cpu {
namespace {

using OptTensor = c10::optional<at::Tensor>;

// host::Accumulate spells out at::acc_type, whose header stays out of the CUDA units.
template <class T>
constexpr bool same_as_acc_type() {
  return std::is_same_v<typename host::Accumulate<T, false>::type, at::acc_type<T, false>> &&
         std::is_same_v<typename host::Accumulate<T, true>::type, at::acc_type<T, true>>;
}
static_assert(same_as_acc_type<at::Half>() && same_as_acc_type<at::BFloat16>() && same_as_acc_type<float>() &&
              same_as_acc_type<double>() && same_as_acc_type<c10::complex<float>>() &&
              same_as_acc_type<c10::complex<double>>());

void run(const host::PreparedScan& c) {
  if (!c.launch) return;
  switch (c.op) {
    case host::ScanOp::kAdd: return host::dispatch_scan_add(c.call, Engine{});
    case host::ScanOp::kMul: return host::dispatch_scan_mul(c.call, Engine{});
    case host::ScanOp::kMax: return host::dispatch_scan_max(c.call, Engine{});
    case host::ScanOp::kMin: return host::dispatch_scan_min(c.call, Engine{});
    case host::ScanOp::kLogAddExp: return host::dispatch_scan_logaddexp(c.call, Engine{});
  }
}

at::Tensor scan_op(const at::Tensor& x, int64_t dim, c10::string_view op, bool exclusive, bool reverse) {
  const auto c = host::prepare_scan(x, c10::nullopt, dim, op, exclusive, reverse);
  run(c);
  return c.result;
}

at::Tensor segmented_scan_op(const at::Tensor& x, const at::Tensor& offsets, int64_t dim, c10::string_view op,
                          bool exclusive, bool reverse) {
  const auto c = host::prepare_scan(x, offsets, dim, op, exclusive, reverse);
  run(c);
  return c.result;
}

std::tuple<at::Tensor, at::Tensor> scan_with_indices_op(const at::Tensor& x, const OptTensor& offsets,
                                                     int64_t dim, c10::string_view op, bool exclusive,
                                                     bool reverse) {
  const auto c = host::prepare_scan_with_indices(x, offsets, dim, op, exclusive, reverse);
  if (c.launch) host::dispatch_scan_with_indices(c.call, Engine{});
  return c.result;
}

std::tuple<at::Tensor, at::Tensor> scan_bicyclic_op(const at::Tensor& p, const at::Tensor& q,
                                                 const OptTensor& offsets, int64_t dim, bool exclusive,
                                                 bool reverse) {
  const auto c = host::prepare_scan_bicyclic(p, q, offsets, dim, exclusive, reverse);
  if (c.launch) host::dispatch_scan_bicyclic(c.call, Engine{});
  return {c.p_out, c.q_out};
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) {
  m.impl("scan", &scan_op);
  m.impl("segmented_scan", &segmented_scan_op);
  m.impl("_scan_with_indices", &scan_with_indices_op);
  m.impl("_scan_bicyclic", &scan_bicyclic_op);
}

}  // namespace parprims::cpu
