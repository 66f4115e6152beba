// CUDA instantiations of the 'max' scan.
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "entry_points.h"

namespace parprims::cuda {

void scan_max(const at::Tensor& in, const at::Tensor& out, int64_t dim, const ScanGeometry& g) {
  host::dispatch_scan_max(in, out, dim, g, Engine{in});
}

}  // namespace parprims::cuda
