// The CUDA ops of the reduction family: segment_reduce and reduce on the segment-reduce engine
// (reduce_<op>.cu, one unit per operator), and the histogram (histogram.cu). The rest is
// host/reduce_host.cpp. Host code only. Schemas: csrc/registration.cpp.
#include <ATen/Context.h>
#include <torch/library.h>

#include "../host/reduce_host.h"
#include "../host/reduce_registration.h"
#include "launch_scope.h"
#include "reduce_instantiations.h"

namespace parprims::cuda {
namespace {

void run_reduce(const host::PreparedReduce& c) {
  const LaunchScope scope(c.in);
  const auto& ctx = scope.context();
  switch (c.call.op) {
    case host::ReduceOp::kSum: return reduce_sum(c.call, ctx);
    case host::ReduceOp::kMean: return reduce_mean(c.call, ctx);
    case host::ReduceOp::kMax: return reduce_max(c.call, ctx);
    case host::ReduceOp::kMin: return reduce_min(c.call, ctx);
    case host::ReduceOp::kProd: return reduce_prod(c.call, ctx);
    case host::ReduceOp::kLogSumExp: return reduce_logsumexp(c.call, ctx);
  }
}

void run_histogram(const host::PreparedHistogram& c) {
  // Weight sums add floats in the order the atomics land; counts are exact integers.
  if (c.weights.defined()) at::globalContext().alertNotDeterministic("torch_parprims.histogram with weights on CUDA");
  host::HistogramCall call;
  call.dtype = c.x.scalar_type();
  call.x = c.x.const_data_ptr();
  call.n = c.x.numel();
  if (c.index.defined()) {
    call.index = c.index.data_ptr<int64_t>();
  } else {
    call.out_dtype = c.out.scalar_type();
    call.out = c.out.data_ptr();
    call.weights = c.weights.defined() ? c.weights.const_data_ptr() : nullptr;
  }
  call.bins = c.bins;
  call.lo = c.lo;
  call.hi = c.hi;
  call.sequences = host::make_geometry(1, call.n, c.offsets, false, false);
  const LaunchScope scope(c.x);
  histogram(call, scope.context());
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) { host::ReduceOps<&run_reduce, &run_histogram>::register_kernels(m); }

}  // namespace parprims::cuda
