// CUDA instantiations of the 'logsumexp' reduction (engine/segment_reduce.cuh; see reduce_instantiations.h).
#include "../host/reduce_dispatch.h"
#include "engine/segment_reduce.cuh"
#include "reduce_instantiations.h"

namespace parprims::cuda {

void reduce_logsumexp(const host::ReduceCall& c, const LaunchContext& ctx) {
  host::dispatch_reduce_logsumexp(c, SegmentReduceEngine{ctx});
}

}  // namespace parprims::cuda
