// CUDA instantiation of the bicyclic test monoid: operand order through every kernel (see
// scan_instantiations.h).
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "scan_instantiations.h"

namespace parprims::cuda {

void scan_bicyclic(const host::PreparedBicyclic& c) { host::dispatch_scan_bicyclic(c, Engine{c.p_in}); }

}  // namespace parprims::cuda
