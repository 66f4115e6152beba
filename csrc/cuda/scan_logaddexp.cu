// CUDA instantiations of the 'logaddexp' scan (see scan_instantiations.h).
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "scan_instantiations.h"

namespace parprims::cuda {

void scan_logaddexp(const host::ScanCall& c, const LaunchContext& ctx) { host::dispatch_scan_logaddexp(c, Engine{ctx}); }

}  // namespace parprims::cuda
