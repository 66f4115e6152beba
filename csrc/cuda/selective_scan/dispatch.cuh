// Typed launches of the selective-scan kernels on the current stream.
#pragma once

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>

#include "launch.h"

namespace parprims::cuda {

// Calls f(In{}, Acc{}) for u's dtype: half types and float compute in float, double in double.
template <class F>
void visit_selective_scan_types(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kFloat: return f(float{}, float{});
    case at::kHalf: return f(at::Half{}, float{});
    case at::kBFloat16: return f(at::BFloat16{}, float{});
    case at::kDouble: return f(double{}, double{});
    default: TORCH_CHECK(false, "u: unsupported dtype ", t);
  }
}

// Launches `kernel` with `smem` bytes of dynamic shared memory, over a grid-stride 1-D grid.
template <class Kernel, class... Args>
void launch_blocks(Kernel kernel, size_t smem, int64_t blocks, const Args&... args) {
  if (smem > 48 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(blocks, int64_t(1) << 24));
  kernel<<<grid, Policy::kThreads, smem, at::cuda::getCurrentCUDAStream()>>>(args...);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace parprims::cuda
