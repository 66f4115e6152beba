// The reductions' kernel call: what the dtype dispatch (host/reduce_dispatch.h) reads, filled
// from tensors by host/reduce_host.cpp. No ATen (host/engine_call.h).
#pragma once

#include "engine_call.h"

namespace parprims::host {

// The reductions by name, as the schemas take them.
enum class ReduceOp { kSum, kMean, kMax, kMin, kProd, kLogSumExp };

// `in` (of `dtype`) reduced along the scanned dimension into `out`, one value per (row,
// segment); `out` holds the empty result already (an empty segment keeps it). The layout is
// the input's alone: the output is written once per segment, and a mask is usually a
// broadcast of far fewer bytes (a padded batch's (B, L, 1) attention mask).
struct ReduceCall : EngineCall {
  ReduceOp op = ReduceOp::kSum;
  const void* in = nullptr;
  void* out = nullptr;
  const bool* mask = nullptr;  // nullptr: every element counts
  RowIndexer in_rows, out_rows, mask_rows;
};

// histogram, or _histogram_bin_index when `index` is set (host/reduce_host.h's
// PreparedHistogram as plain data, for the CUDA kernels).
struct HistogramCall {
  c10::ScalarType dtype = c10::ScalarType::Undefined;      // x's
  c10::ScalarType out_dtype = c10::ScalarType::Undefined;  // int64 counts, or float32/float64 sums
  const void* x = nullptr;        // n contiguous values
  const void* weights = nullptr;  // n values of out_dtype; nullptr for counts
  void* out = nullptr;            // (sequences, bins), zeroed
  int64_t* index = nullptr;       // n bin indices instead of a histogram
  int64_t n = 0;
  int64_t bins = 0;
  double lo = 0, hi = 0;
  ScanGeometry sequences;  // one row of n values, cut by the offsets
};

}  // namespace parprims::host
