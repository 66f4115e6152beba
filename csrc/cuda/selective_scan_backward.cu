// Instantiations of the fused selective-scan backward (selective_scan/backward.cuh).
#include "selective_scan/backward.cuh"
#include "selective_scan/dispatch.cuh"

namespace parprims::cuda {

void launch_selective_scan_backward(const SelectiveScanParams& p, const SelectiveScanGrads& grads,
                                    const SelectiveScanShape& s, at::ScalarType input_dtype) {
  visit_selective_scan_types(input_dtype, [&](auto in, auto acc) {
    using In = decltype(in);
    using Acc = decltype(acc);
    const size_t smem = BackwardChunk<In, Acc>::smem_bytes(s, p.B.variable, p.C.variable);
    launch_blocks(selective_scan_backward_kernel<In, Acc>, smem, s.blocks, p, grads, s);
  });
}

}  // namespace parprims::cuda
