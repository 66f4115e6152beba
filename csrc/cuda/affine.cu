// CUDA instantiations of the elementwise affine recurrence (see affine_instantiations.h).
#include "../host/affine_dispatch.h"
#include "affine_instantiations.h"
#include "engine/engine.cuh"

namespace parprims::cuda {

void affine(const host::AffineCall& c, const LaunchContext& ctx) { host::dispatch_affine(c, Engine{ctx}); }

}  // namespace parprims::cuda
