// The scan family's kernel calls: what the dtype dispatch (host/scan_dispatch.h) reads, as plain
// pointers and row indexers, filled from tensors by host/scan_host.cpp. c10's scalar types and
// no ATen: the CUDA kernel units include this (cuda/launch_context.h says why).
#pragma once

#include "engine_call.h"

namespace parprims::host {

// scan / segmented_scan: `in` (of `dtype`) scanned into `out` (int64 for add over integers and
// bool).
struct ScanCall : EngineCall {
  const void* in = nullptr;
  void* out = nullptr;
  RowIndexer in_rows, out_rows;
};

// _scan_with_indices: max or min, and the position each output came from.
struct ScanWithIndicesCall : EngineCall {
  bool is_max = true;
  const void* in = nullptr;
  void* out = nullptr;
  int64_t* index = nullptr;
  RowIndexer in_rows, out_rows, index_rows;
};

// _scan_extreme_backward: the gradient of a max or min scan from the forward's output `out` and
// its gradient `grad` (ExtremeScanGradProblem); dtype: out's. Packed sequences are marked at
// their first steps in `starts` (a byte a position along the dim); the geometry has none.
struct ExtremeScanGradCall : EngineCall {
  const void* grad = nullptr;
  const void* out = nullptr;
  void* grad_in = nullptr;
  const uint8_t* starts = nullptr;
  RowIndexer grad_rows, out_rows, grad_in_rows;
  int64_t len = 0;
  bool exclusive = false;
  bool forward_reverse = false;  // the forward's direction
};

// _scan_bicyclic: int64 pairs (p, q).
struct BicyclicCall : EngineCall {
  const int64_t* p_in = nullptr;
  const int64_t* q_in = nullptr;
  int64_t* p_out = nullptr;
  int64_t* q_out = nullptr;
  RowIndexer p_in_rows, q_in_rows, p_out_rows, q_out_rows;
};

}  // namespace parprims::host
