// The affine recurrences' kernel calls: what the dtype dispatch (host/affine_dispatch.h)
// reads, filled from tensors by host/affine_host.cpp. No ATen (host/engine_call.h).
#pragma once

#include "engine_call.h"

namespace parprims::host {

// h_t = a_t * h_{t-1} + b_t (or exp(a_t) * ... with log gates); dtype: b's. States (initial,
// final) are contiguous (segments, rows) in the state dtype (float32 for half types).
struct AffineCall : EngineCall {
  const void* a = nullptr;
  const void* b = nullptr;
  void* h = nullptr;
  const void* initial = nullptr;  // nullptr for zeros
  void* final_state = nullptr;
  RowIndexer a_rows, b_rows, h_rows;
  int64_t rows = 0;
  bool log_gates = false;
};

// affine_scan's one-scan backward (AffineGradProblem); dtype: h's.
struct AffineGradCall : EngineCall {
  const void* a = nullptr;
  const void* grad_h = nullptr;
  const void* h = nullptr;
  void* grad_a = nullptr;
  void* grad_b = nullptr;
  const void* grad_final = nullptr;  // nullptr for zeros
  const void* initial = nullptr;     // nullptr for zeros
  void* grad_initial = nullptr;
  RowIndexer a_rows, grad_h_rows, h_rows, grad_a_rows, grad_b_rows;
  int64_t rows = 0;
  int64_t len = 0;
  bool log_gates = false;
  bool forward_reverse = false;  // the forward's direction
};

// The matrix form over states of size d (A: d x d per step); dtype float32 or float64. The row
// indexers map the leading dims (state dims dropped); the strides step through the state dims.
struct MatrixAffineCall : EngineCall {
  const void* A = nullptr;
  const void* b = nullptr;
  void* h = nullptr;
  const void* initial = nullptr;  // nullptr for zeros
  void* final_state = nullptr;
  RowIndexer A_rows, b_rows, h_rows;
  int64_t rows = 0;
  int d = 0;
  int64_t A_row_stride = 0, A_col_stride = 0, b_stride = 0, h_stride = 0;
};

}  // namespace parprims::host
