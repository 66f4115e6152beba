// CUDA instantiations of the max/min scans' backward (see scan_instantiations.h).
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "scan_instantiations.h"

namespace parprims::cuda {

void scan_extreme_grad(const host::ExtremeScanGradCall& c, const LaunchContext& ctx) {
  host::dispatch_scan_extreme_grad(c, Engine{ctx});
}

}  // namespace parprims::cuda
