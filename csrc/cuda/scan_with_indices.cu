// CUDA instantiations of max/min scans with indices (see scan_instantiations.h).
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "scan_instantiations.h"

namespace parprims::cuda {

void scan_with_indices(const host::PreparedScanWithIndices& c) {
  host::dispatch_scan_with_indices(c, Engine{c.in});
}

}  // namespace parprims::cuda
