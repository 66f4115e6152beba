// The CUDA kernels of the reduction family, instantiated a few operators per translation unit
// (reduce_sum_mean.cu, reduce_max_min.cu, reduce_prod_logsumexp.cu) so that the build compiles
// them in parallel, and the histogram (histogram.cu). reduce_kernel.cu holds the ops that call
// them.
#pragma once

#include "../host/reduce_host.h"

namespace parprims::cuda {

void reduce_sum_mean(const host::PreparedReduce& c);
void reduce_max_min(const host::PreparedReduce& c);
void reduce_prod_logsumexp(const host::PreparedReduce& c);
void histogram(const host::PreparedHistogram& c);

}  // namespace parprims::cuda
