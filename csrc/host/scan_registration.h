// The scan family's kernel table, shared by the CPU and CUDA registrations: every op is
// device-independent host code (host/scan_host.cpp) around one device step per prepared call
// (cpu/scan_kernel.cpp, cuda/scan_kernel.cpp), called only when there is something to scan.
#pragma once

#include <torch/library.h>

#include <optional>
#include <tuple>

#include "scan_host.h"

namespace parprims::host {

template <void (*Scan)(const PreparedScan&), void (*ScanWithIndices)(const PreparedScanWithIndices&),
          void (*Bicyclic)(const PreparedBicyclic&), void (*ExtremeGrad)(const PreparedExtremeScanGrad&)>
struct ScanOps {
  using OptTensor = std::optional<at::Tensor>;

  static at::Tensor scan_op(const at::Tensor& x, int64_t dim, c10::string_view op, bool exclusive, bool reverse) {
    const auto c = prepare_scan(x, std::nullopt, dim, op, exclusive, reverse);
    if (c.launch) Scan(c);
    return c.result;
  }

  static at::Tensor segmented_scan_op(const at::Tensor& x, const at::Tensor& offsets, int64_t dim,
                                      c10::string_view op, bool exclusive, bool reverse) {
    const auto c = prepare_scan(x, offsets, dim, op, exclusive, reverse);
    if (c.launch) Scan(c);
    return c.result;
  }

  static std::tuple<at::Tensor, at::Tensor> scan_with_indices_op(const at::Tensor& x, const OptTensor& offsets,
                                                                 int64_t dim, c10::string_view op, bool exclusive,
                                                                 bool reverse) {
    const auto c = prepare_scan_with_indices(x, offsets, dim, op, exclusive, reverse);
    if (c.launch) ScanWithIndices(c);
    return c.result;
  }

  static std::tuple<at::Tensor, at::Tensor> scan_bicyclic_op(const at::Tensor& p, const at::Tensor& q,
                                                             const OptTensor& offsets, int64_t dim, bool exclusive,
                                                             bool reverse) {
    const auto c = prepare_scan_bicyclic(p, q, offsets, dim, exclusive, reverse);
    if (c.launch) Bicyclic(c);
    return {c.p_out, c.q_out};
  }

  static at::Tensor scan_extreme_backward_op(const at::Tensor& grad, const at::Tensor& out, const OptTensor& offsets,
                                             int64_t dim, bool exclusive, bool reverse) {
    const auto c = prepare_scan_extreme_backward(grad, out, offsets, dim, exclusive, reverse);
    if (c.launch) ExtremeGrad(c);
    return c.result;
  }

  // Registers every scan op for the library's dispatch key (schemas: registration.cpp).
  static void register_kernels(torch::Library& m) {
    m.impl("scan", &scan_op);
    m.impl("segmented_scan", &segmented_scan_op);
    m.impl("_scan_with_indices", &scan_with_indices_op);
    m.impl("_scan_bicyclic", &scan_bicyclic_op);
    m.impl("_scan_extreme_backward", &scan_extreme_backward_op);
  }
};

}  // namespace parprims::host
