// CUDA instantiations of the 'prod' reduction (engine/segment_reduce.cuh; see reduce_instantiations.h).
#include "../host/reduce_dispatch.h"
#include "engine/segment_reduce.cuh"
#include "reduce_instantiations.h"

namespace parprims::cuda {

void reduce_prod(const host::PreparedReduce& c) { host::dispatch_reduce_prod(c, SegmentReduceEngine{c.in}); }

}  // namespace parprims::cuda
