// The ATen side of a CUDA launch: a CUDA op holds a LaunchScope for the length of its kernel
// calls. It makes the input's device current, and hands the kernel units (launch_context.h)
// the current stream, the SM count and a workspace from PyTorch's caching allocator.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>

#include <vector>

#include "launch_context.h"

namespace parprims::cuda {

class TensorWorkspace final : public Workspace {
 public:
  explicit TensorWorkspace(c10::Device device) : device_(device) {}
  void* allocate(std::size_t bytes) override;

 private:
  c10::Device device_;
  std::vector<at::Tensor> buffers_;  // alive until the op returns
};

class LaunchScope {
 public:
  // `like`: any tensor on the device the kernels run on.
  explicit LaunchScope(const at::Tensor& like);
  LaunchScope(const LaunchScope&) = delete;
  LaunchScope& operator=(const LaunchScope&) = delete;

  const LaunchContext& context() const { return context_; }

 private:
  c10::cuda::CUDAGuard guard_;
  TensorWorkspace workspace_;
  LaunchContext context_;
};

}  // namespace parprims::cuda
