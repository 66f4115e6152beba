// The CUDA ops of the reduction family: segment_reduce and reduce on the CUDA scan engine
// (reduce_sum_mean.cu, reduce_max_min.cu, reduce_prod_logsumexp.cu), and the histogram
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
    case host::ReduceOp::kSum:
    case host::ReduceOp::kMean: return reduce_sum_mean(c);
    case host::ReduceOp::kMax:
    case host::ReduceOp::kMin: return reduce_max_min(c);
    case host::ReduceOp::kProd:
    case host::ReduceOp::kLogSumExp: return reduce_prod_logsumexp(c);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) { host::ReduceOps<&run_reduce, &histogram>::register_kernels(m); }

}  // namespace parprims::cuda
