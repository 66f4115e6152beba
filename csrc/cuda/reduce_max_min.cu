// CUDA instantiations of the max and min reductions on the scan engine (see reduce_instantiations.h).
#include "../host/reduce_dispatch.h"
#include "engine/engine.cuh"
#include "reduce_instantiations.h"

namespace parprims::cuda {

void reduce_max_min(const host::PreparedReduce& c) { host::dispatch_reduce_max_min(c, Engine{c.in}); }

}  // namespace parprims::cuda
