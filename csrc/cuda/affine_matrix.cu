// CUDA instantiations of the dense (small matrix) affine recurrence (see
// affine_instantiations.h).
#include "../host/affine_dispatch.h"
#include "affine_instantiations.h"
#include "engine/engine.cuh"

namespace parprims::cuda {

void matrix_affine(const host::MatrixAffineCall& c, const LaunchContext& ctx) {
  host::dispatch_matrix_affine(c, Engine{ctx});
}

}  // namespace parprims::cuda
