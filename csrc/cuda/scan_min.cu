// CUDA instantiations of the 'min' scan.
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "entry_points.h"

namespace parprims::cuda {

void scan_min(const at::Tensor& in, const at::Tensor& out, int64_t dim, const ScanGeometry& g) {
  host::dispatch_scan_min(in, out, dim, g, Engine{in});
}

}  // namespace parprims::cuda
