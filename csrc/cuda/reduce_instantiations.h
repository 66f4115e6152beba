// The CUDA kernels of the reduction family, instantiated one operator per translation unit
// (reduce_sum.cu, reduce_mean.cu, reduce_max.cu, reduce_min.cu, reduce_prod.cu,
// reduce_logsumexp.cu; each about the size of one scan operator's unit) so that the build
// compiles them in parallel, and the histogram (histogram.cu). reduce_kernel.cu holds the ops
// that call them.
#pragma once

#include "../host/reduce_host.h"

namespace parprims::cuda {

void reduce_sum(const host::PreparedReduce& c);
void reduce_mean(const host::PreparedReduce& c);
void reduce_max(const host::PreparedReduce& c);
void reduce_min(const host::PreparedReduce& c);
void reduce_prod(const host::PreparedReduce& c);
void reduce_logsumexp(const host::PreparedReduce& c);
void histogram(const host::PreparedHistogram& c);

}  // namespace parprims::cuda
