#include "launch_scope.h"

#include <ATen/cuda/CUDAContextLight.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAStream.h>

namespace parprims::cuda {

void* TensorWorkspace::allocate(std::size_t bytes) {
  buffers_.push_back(at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).device(device_)));
  return buffers_.back().data_ptr();
}

LaunchScope::LaunchScope(const at::Tensor& like) : guard_(like.device()), workspace_(like.device()) {
  context_.stream = at::cuda::getCurrentCUDAStream().stream();
  context_.sm_count = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  context_.workspace = &workspace_;
}

}  // namespace parprims::cuda
