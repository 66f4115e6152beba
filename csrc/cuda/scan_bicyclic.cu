// CUDA instantiation of the bicyclic test monoid: operand order through every kernel.
#include "../host/scan_dispatch.h"
#include "engine/engine.cuh"
#include "entry_points.h"

namespace parprims::cuda {

void scan_bicyclic(const at::Tensor& p_in, const at::Tensor& q_in, const at::Tensor& p_out,
                   const at::Tensor& q_out, int64_t dim, const ScanGeometry& g) {
  host::dispatch_scan_bicyclic(p_in, q_in, p_out, q_out, dim, g, Engine{p_in});
}

}  // namespace parprims::cuda
