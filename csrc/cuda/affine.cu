// CUDA instantiations of the elementwise affine recurrence.
#include "../host/affine_dispatch.h"
#include "engine/engine.cuh"
#include "entry_points.h"

namespace parprims::cuda {

void affine(const host::AffineArgs& args, const ScanGeometry& g) {
  host::dispatch_affine(args, g, Engine{args.b});
}

}  // namespace parprims::cuda
