// Programmatic dependent launch (sm_90 and later; no-ops before): a kernel lets the next kernel
// of the stream start while it runs, and that kernel waits for it (complete, its writes visible)
// only where it reads what it wrote. What runs before the wait (loads of the inputs, index
// arithmetic) overlaps the end of the kernel before it, and the launch latency between the two
// is hidden. Shared by the compaction's passes and the segment reductions' fix-up.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

#include <utility>

#include "../launch_context.h"

namespace parprims::cuda {

// In the kernel before: the next one may start (once every block of this one has said so, or
// exited; so its blocks never take an SM's room from a block of this one not yet started).
// Only where the next kernel is known to be one that waits before it reads this one's output
// (a pass and its own fix-up): another op's kernel launched by `launch_after` may read its
// inputs before its wait, and would race with a kernel that let it start early.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// In the kernel launched by `launch_after`: waits until the kernel before has completed and its
// writes are visible (returns at once when the kernel was launched plainly).
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Launches `kernel` as a programmatic dependent of the kernel before it in the stream where the
// device has it (sm_90 and later), plainly elsewhere, with `smem` bytes of dynamic shared
// memory. Captured into CUDA graphs as such.
template <class... Params, class... Args>
void launch_after_with_smem(void (*kernel)(Params...), unsigned blocks, unsigned threads, size_t smem,
                            const LaunchContext& ctx, Args&&... args) {
  int device = 0, major = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = smem;
  config.stream = ctx.stream;
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = major >= 9 ? 1 : 0;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

// The same without dynamic shared memory.
template <class... Params, class... Args>
void launch_after(void (*kernel)(Params...), unsigned blocks, unsigned threads, const LaunchContext& ctx,
                  Args&&... args) {
  launch_after_with_smem(kernel, blocks, threads, 0, ctx, std::forward<Args>(args)...);
}

}  // namespace parprims::cuda
