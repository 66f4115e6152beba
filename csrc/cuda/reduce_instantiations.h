// The CUDA kernels of the reduction family, instantiated one operator per translation unit
// (reduce_sum.cu, reduce_mean.cu, reduce_max.cu, reduce_min.cu, reduce_prod.cu,
// reduce_logsumexp.cu; each about the size of one scan operator's unit) so that the build
// compiles them in parallel, and the histogram (histogram.cu). reduce_kernel.cpp holds the ops
// that call them.
#pragma once

#include "../host/reduce_call.h"
#include "launch_context.h"

namespace parprims::cuda {

void reduce_sum(const host::ReduceCall& c, const LaunchContext& ctx);
void reduce_mean(const host::ReduceCall& c, const LaunchContext& ctx);
void reduce_max(const host::ReduceCall& c, const LaunchContext& ctx);
void reduce_min(const host::ReduceCall& c, const LaunchContext& ctx);
void reduce_prod(const host::ReduceCall& c, const LaunchContext& ctx);
void reduce_logsumexp(const host::ReduceCall& c, const LaunchContext& ctx);
void histogram(const host::HistogramCall& c, const LaunchContext& ctx);

}  // namespace parprims::cuda
