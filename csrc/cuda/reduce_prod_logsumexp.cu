// CUDA instantiations of the prod and logsumexp reductions on the scan engine (see reduce_instantiations.h).
#include "../host/reduce_dispatch.h"
#include "engine/engine.cuh"
#include "reduce_instantiations.h"

namespace parprims::cuda {

void reduce_prod_logsumexp(const host::PreparedReduce& c) { host::dispatch_reduce_prod_logsumexp(c, Engine{c.in}); }

}  // namespace parprims::cuda
