// CUDA instantiations of affine_scan's one-scan backward (see affine_instantiations.h).
#include "../host/affine_dispatch.h"
#include "affine_instantiations.h"
#include "engine/engine.cuh"

namespace parprims::cuda {

void affine_grad(const host::AffineGradCall& c, const LaunchContext& ctx) {
  host::dispatch_affine_grad(c, Engine{ctx});
}

}  // namespace parprims::cuda
