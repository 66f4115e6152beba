// CUDA instantiations of max/min scans with indices (the forward state of their backward).
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "entry_points.h"

namespace parprims::cuda {

void scan_arg(bool is_max, const at::Tensor& in, const at::Tensor& out, const at::Tensor& index,
              int64_t dim, const ScanGeometry& g) {
  host::dispatch_scan_arg(is_max, in, out, index, dim, g, Engine{in});
}

}  // namespace parprims::cuda
