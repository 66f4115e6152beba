// Host side of the scan family (scan, segmented_scan, _scan_with_indices, _scan_bicyclic),
// shared by the CPU and CUDA kernel files: argument checks, output allocation and geometry.
// Each prepare_* returns a "prepared call": the tensors, and the plain kernel call
// (host/scan_call.h) for a device's dtype dispatch (host/scan_dispatch.h) and engine; the op
// returns its `result`. Device-independent.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

#include "common.h"
#include "scan_call.h"

namespace parprims::host {

// The scan operators by name, as the schemas take them.
enum class ScanOp { kAdd, kMul, kMax, kMin, kLogAddExp };
ScanOp parse_scan_op(c10::string_view op);

// The dtype of a scan's output: int64 for add over integers and bool, the input's otherwise.
at::ScalarType scan_output_dtype(ScanOp op, at::ScalarType in);
void check_scan_dtype(ScanOp op, at::ScalarType in);

// scan / segmented_scan: scan `in` into `out` (a 0-d input scans as a 1-element vector).
struct PreparedScan {
  ScanOp op;
  at::Tensor in, out;  // what the engine reads and writes
  at::Tensor result;   // what the op returns: `out`, or its 0-d view
  at::Tensor offsets;  // contiguous, or undefined: what the geometry points into
  bool launch = false;  // false when there is nothing to scan (no elements)
  ScanCall call;        // set when `launch`
};
PreparedScan prepare_scan(const at::Tensor& x, const c10::optional<at::Tensor>& offsets, int64_t dim,
                          c10::string_view op, bool exclusive, bool reverse);

// _scan_with_indices: max/min scans with the position each output came from.
struct PreparedScanWithIndices {
  at::Tensor in, out, index;
  std::tuple<at::Tensor, at::Tensor> result;  // (values, indices), 0-d views for a 0-d input
  at::Tensor offsets;  // contiguous, or undefined: what the geometry points into
  bool launch = false;
  ScanWithIndicesCall call;  // set when `launch`
};
PreparedScanWithIndices prepare_scan_with_indices(const at::Tensor& x,
                                                  const c10::optional<at::Tensor>& offsets,
                                                  int64_t dim, c10::string_view op, bool exclusive,
                                                  bool reverse);

// _scan_extreme_backward: the gradient of a max/min scan (packed sequences optional) from the
// forward's output and the gradient of that output.
struct PreparedExtremeScanGrad {
  at::Tensor grad, out, grad_in;
  at::Tensor starts;  // packed sequences: their first steps in scan order, marked (undefined without)
  at::Tensor result;  // grad_in, or its 0-d view
  bool launch = false;
  ExtremeScanGradCall call;  // set when `launch`
};
PreparedExtremeScanGrad prepare_scan_extreme_backward(const at::Tensor& grad, const at::Tensor& out,
                                                      const c10::optional<at::Tensor>& offsets, int64_t dim,
                                                      bool exclusive, bool reverse);

// _scan_bicyclic: the exact non-commutative test monoid over int64 pairs (p, q).
struct PreparedBicyclic {
  at::Tensor p_in, q_in, p_out, q_out;
  at::Tensor offsets;  // contiguous, or undefined: what the geometry points into
  bool launch = false;
  BicyclicCall call;  // set when `launch`
};
PreparedBicyclic prepare_scan_bicyclic(const at::Tensor& p, const at::Tensor& q,
                                       const c10::optional<at::Tensor>& offsets, int64_t dim,
                                       bool exclusive, bool reverse);

}  // namespace parprims::host
