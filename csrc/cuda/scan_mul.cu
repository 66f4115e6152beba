// CUDA instantiations of the 'mul' scan (see scan_instantiations.h).
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "scan_instantiations.h"

namespace parprims::cuda {

void scan_mul(const host::PreparedScan& c) { host::dispatch_scan_mul(c, Engine{c.in}); }

}  // namespace parprims::cuda
