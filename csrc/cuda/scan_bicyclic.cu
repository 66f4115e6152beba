// CUDA instantiation of the bicyclic test monoid: operand order through every kernel (see
// scan_instantiations.h).
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "scan_instantiations.h"

namespace parprims::cuda {

void scan_bicyclic(const host::BicyclicCall& c, const LaunchContext& ctx) {
  host::dispatch_scan_bicyclic(c, Engine{ctx});
}

}  // namespace parprims::cuda
