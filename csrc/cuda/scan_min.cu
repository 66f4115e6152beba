// CUDA instantiations of the 'min' scan (see scan_instantiations.h).
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "scan_instantiations.h"

namespace parprims::cuda {

void scan_min(const host::PreparedScan& c) { host::dispatch_scan_min(c, Engine{c.in}); }

}  // namespace parprims::cuda
