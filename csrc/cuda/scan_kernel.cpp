// The CUDA ops of the scan family: scan, segmented_scan, _scan_with_indices, _scan_bicyclic.
// Each checks and allocates through host/scan_host.h, then calls its operator's kernel unit
// (scan_instantiations.h: the dtype dispatch onto the CUDA engine, cuda/engine/engine.cuh).
// Host code only (the host compiler builds it). Schemas: csrc/registration.cpp.
#include <torch/library.h>

#include "../host/scan_host.h"
#include "launch_scope.h"
#include "scan_instantiations.h"

namespace parprims::cuda {
namespace {

using OptTensor = c10::optional<at::Tensor>;

void run(const host::PreparedScan& c) {
  if (!c.launch) return;
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

at::Tensor scan_op(const at::Tensor& x, int64_t dim, c10::string_view op, bool exclusive, bool reverse) {
  const auto c = host::prepare_scan(x, c10::nullopt, dim, op, exclusive, reverse);
  run(c);
  return c.result;
}

at::Tensor segmented_scan_op(const at::Tensor& x, const at::Tensor& offsets, int64_t dim,
                             c10::string_view op, bool exclusive, bool reverse) {
  const auto c = host::prepare_scan(x, offsets, dim, op, exclusive, reverse);
  run(c);
  return c.result;
}

std::tuple<at::Tensor, at::Tensor> scan_with_indices_op(const at::Tensor& x, const OptTensor& offsets,
                                                        int64_t dim, c10::string_view op,
                                                        bool exclusive, bool reverse) {
  const auto c = host::prepare_scan_with_indices(x, offsets, dim, op, exclusive, reverse);
  if (c.launch) {
    const LaunchScope scope(c.in);
    scan_with_indices(c.call, scope.context());
  }
  return c.result;
}

std::tuple<at::Tensor, at::Tensor> scan_bicyclic_op(const at::Tensor& p, const at::Tensor& q,
                                                    const OptTensor& offsets, int64_t dim,
                                                    bool exclusive, bool reverse) {
  const auto c = host::prepare_scan_bicyclic(p, q, offsets, dim, exclusive, reverse);
  if (c.launch) {
    const LaunchScope scope(c.p_in);
    scan_bicyclic(c.call, scope.context());
  }
  return {c.p_out, c.q_out};
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) {
  m.impl("scan", &scan_op);
  m.impl("segmented_scan", &segmented_scan_op);
  m.impl("_scan_with_indices", &scan_with_indices_op);
  m.impl("_scan_bicyclic", &scan_bicyclic_op);
}

}  // namespace parprims::cuda
