// CUDA instantiations of the dense (small matrix) affine recurrence.
#include "../host/affine_dispatch.h"
#include "engine/engine.cuh"
#include "entry_points.h"

namespace parprims::cuda {

void matrix_affine(const host::MatrixAffineArgs& args, const ScanGeometry& g) {
  host::dispatch_matrix_affine(args, g, Engine{args.b});
}

}  // namespace parprims::cuda
