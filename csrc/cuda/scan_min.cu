// CUDA instantiations of the 'min' scan (see scan_instantiations.h).
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "scan_instantiations.h"

namespace parprims::cuda {

void scan_min(const host::ScanCall& c, const LaunchContext& ctx) { host::dispatch_scan_min(c, Engine{ctx}); }

}  // namespace parprims::cuda
