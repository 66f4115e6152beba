// CUDA instantiations of the compaction (see compact_instantiations.h).
#include "../host/compact_dispatch.h"
#include "compact_instantiations.h"
#include "engine/engine.cuh"

namespace parprims::cuda {

void compact_scatter(const host::PreparedCompact& c) { host::dispatch_compact(c, Engine{c.mask}); }

}  // namespace parprims::cuda
