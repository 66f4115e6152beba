// CUDA instantiations of the 'logaddexp' scan.
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "entry_points.h"

namespace parprims::cuda {

void scan_logaddexp(const at::Tensor& in, const at::Tensor& out, int64_t dim, const ScanGeometry& g) {
  host::dispatch_scan_logaddexp(in, out, dim, g, Engine{in});
}

}  // namespace parprims::cuda
