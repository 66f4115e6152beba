// The CPU ops of the scan family: scan, segmented_scan, _scan_with_indices, _scan_bicyclic.
// Each checks and allocates through host/scan_host.h, dispatches on the dtype
// (host/scan_dispatch.h) onto the CPU engine (cpu/engine.h). Schemas: csrc/registration.cpp.
#include <torch/library.h>

#include "../host/scan_dispatch.h"
#include "../host/scan_host.h"
#include "engine_cpu.h"

namespace parprims::cpu {
namespace {

using OptTensor = c10::optional<at::Tensor>;

void run(const host::PreparedScan& c) {
  if (!c.launch) return;
  switch (c.op) {
    case host::ScanOp::kAdd: return host::dispatch_scan_add(c, Engine{});
    case host::ScanOp::kMul: return host::dispatch_scan_mul(c, Engine{});
    case host::ScanOp::kMax: return host::dispatch_scan_max(c, Engine{});
    case host::ScanOp::kMin: return host::dispatch_scan_min(c, Engine{});
    case host::ScanOp::kLogAddExp: return host::dispatch_scan_logaddexp(c, Engine{});
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
  if (c.launch) host::dispatch_scan_with_indices(c, Engine{});
  return c.result;
}

std::tuple<at::Tensor, at::Tensor> scan_bicyclic_op(const at::Tensor& p, const at::Tensor& q,
                                                 const OptTensor& offsets, int64_t dim, bool exclusive,
                                                 bool reverse) {
  const auto c = host::prepare_scan_bicyclic(p, q, offsets, dim, exclusive, reverse);
  if (c.launch) host::dispatch_scan_bicyclic(c, Engine{});
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
