// Host side of the reduction family (segment_reduce, reduce, histogram), shared by the CPU and
// CUDA kernel files: argument checks, output allocation and geometry. Device-independent.
//
// segment_reduce and reduce run on the scan engines (core/reduce_problems.h) through a device's
// ReduceRunner; histogram has its own kernels, reached through a HistogramRunner.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "common.h"
#include "reduce_call.h"

namespace parprims::host {

// The reductions by name, as the schemas take them (ReduceOp: host/reduce_call.h).
ReduceOp parse_reduce_op(c10::string_view op);

// The dtype of a reduction's output: int64 for sum and prod over integers and bool (as
// torch.sum and torch.prod), the input's otherwise.
at::ScalarType reduce_output_dtype(ReduceOp op, at::ScalarType in);

// One reduction on an engine: `in` reduced along its dim into `out`, which has `in`'s shape
// with that dim of size S (segments) or 1 (reduce). The host fills `out` with the empty result
// first; the runner reduces every non-empty (row, segment) into it. It is not called when
// there is nothing to reduce.
struct PreparedReduce {
  at::Tensor in;       // x (a 0-d x as a 1-element vector)
  at::Tensor mask;     // bool, expanded to in's shape; undefined without a mask
  at::Tensor out;      // what the engine writes
  at::Tensor result;   // what the op returns: out, or a view of it
  at::Tensor offsets;  // contiguous, or undefined: what the geometry points into
  ReduceCall call;
};

using ReduceRunner = void (*)(const PreparedReduce&);

// segment_reduce(x, offsets, op, dim) -> (x.shape with dim replaced by S)
at::Tensor segment_reduce(const at::Tensor& x, const at::Tensor& offsets, c10::string_view op, int64_t dim,
                          ReduceRunner run);

// reduce(x, dim, op, mask, keepdim)
at::Tensor reduce(const at::Tensor& x, int64_t dim, c10::string_view op, const std::optional<at::Tensor>& mask,
                  bool keepdim, ReduceRunner run);

// ---- histogram ----

// Equal-width bins over [lo, hi]: bin = floor((v - lo) * bins / (hi - lo)), the value hi in the
// last bin; values outside [lo, hi] and NaN are skipped. `out` is zeroed here: (S, bins) int64
// counts, or weight sums in `weights`' dtype (float32 for half weights); one row without offsets.
struct PreparedHistogram {
  at::Tensor x;        // 1-D contiguous view of the values
  at::Tensor weights;  // 1-D contiguous, or undefined for counts
  at::Tensor offsets;  // contiguous, or undefined: one histogram of every value
  at::Tensor out;      // (S, bins) or (1, bins), zeroed; undefined for bin indices
  at::Tensor index;    // _histogram_bin_index: x's flat int64 positions in out (-1: skipped)
  at::Tensor result;   // what the op returns: out, or its (bins,) view
  int64_t bins = 0;
  double lo = 0, hi = 0;
};

// Fills `out` (a histogram) or `index` (the bin indices) for the prepared call.
using HistogramRunner = void (*)(const PreparedHistogram&);

at::Tensor histogram(const at::Tensor& x, int64_t bins, double lo, double hi, const std::optional<at::Tensor>& weights,
                     const std::optional<at::Tensor>& offsets, HistogramRunner run);

// _histogram_bin_index(x, bins, lo, hi, offsets) -> int64 of x's shape: the flat position in
// histogram's (S, bins) output that each value adds to (sequence * bins + bin), -1 for a value
// it skips. histogram's gradient with respect to weights gathers through it.
at::Tensor histogram_bin_index(const at::Tensor& x, int64_t bins, double lo, double hi,
                               const std::optional<at::Tensor>& offsets, HistogramRunner run);

}  // namespace parprims::host
