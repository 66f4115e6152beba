// CUDA instantiations of the 'add' scan.
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "entry_points.h"

namespace parprims::cuda {

void scan_add(const at::Tensor& in, const at::Tensor& out, int64_t dim, const ScanGeometry& g) {
  host::dispatch_scan_add(in, out, dim, g, Engine{in});
}

}  // namespace parprims::cuda
