// CUDA instantiations of max/min scans with indices (see scan_instantiations.h).
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "scan_instantiations.h"

namespace parprims::cuda {

void scan_with_indices(const host::ScanWithIndicesCall& c, const LaunchContext& ctx) {
  host::dispatch_scan_with_indices(c, Engine{ctx});
}

}  // namespace parprims::cuda
