// CUDA instantiations of the 'logsumexp' reduction on the scan engine (see reduce_instantiations.h).
#include "../host/reduce_dispatch.h"
#include "engine/engine.cuh"
#include "reduce_instantiations.h"

namespace parprims::cuda {

void reduce_logsumexp(const host::PreparedReduce& c) { host::dispatch_reduce_logsumexp(c, Engine{c.in}); }

}  // namespace parprims::cuda
