// The CUDA ops of the reduction family: segment_reduce and reduce on the segment-reduce engine
// (reduce_<op>.cu, one unit per operator), and the histogram
// (histogram.cu). The rest is host/reduce_host.cpp. Schemas: csrc/registration.cpp.
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../host/reduce_host.h"
#include "../host/reduce_registration.h"
#include "reduce_instantiations.h"

namespace parprims::cuda {
namespace {

void run_reduce(const host::PreparedReduce& c) {
  const c10::cuda::CUDAGuard guard(c.in.device());
  switch (c.op) {
    case host::ReduceOp::kSum: return reduce_sum(c);
    case host::ReduceOp::kMean: return reduce_mean(c);
    case host::ReduceOp::kMax: return reduce_max(c);
    case host::ReduceOp::kMin: return reduce_min(c);
    case host::ReduceOp::kProd: return reduce_prod(c);
    case host::ReduceOp::kLogSumExp: return reduce_logsumexp(c);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) { host::ReduceOps<&run_reduce, &histogram>::register_kernels(m); }

}  // namespace parprims::cuda
