// CUDA instantiations of the 'add' scan (see scan_instantiations.h).
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "scan_instantiations.h"

namespace parprims::cuda {

void scan_add(const host::ScanCall& c, const LaunchContext& ctx) { host::dispatch_scan_add(c, Engine{ctx}); }

}  // namespace parprims::cuda
