// CUDA instantiations of the 'mul' scan.
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "entry_points.h"

namespace parprims::cuda {

void scan_mul(const at::Tensor& in, const at::Tensor& out, int64_t dim, const ScanGeometry& g) {
  host::dispatch_scan_mul(in, out, dim, g, Engine{in});
}

}  // namespace parprims::cuda
