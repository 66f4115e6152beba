// What a CUDA kernel unit needs from the op that calls it: the stream, the SM count and
// temporary device memory. The ops (the .cpp files of csrc/cuda/, which see ATen) fill it from
// PyTorch's current stream and caching allocator (launch_scope.h); the kernel units (.cu)
// include no ATen header, so that nvcc parses none of it (three times: once per architecture
// and once for the host) and their compile time is their device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace parprims::cuda {

// Device memory for one op call. Stream-ordered (PyTorch's caching allocator): the memory goes
// back when the call returns, and is reused only by work queued after the kernels that use it.
class Workspace {
 public:
  virtual void* allocate(std::size_t bytes) = 0;

 protected:
  ~Workspace() = default;
};

struct LaunchContext {
  cudaStream_t stream = nullptr;  // the current stream of the op's device
  int sm_count = 0;               // streaming multiprocessors of that device
  Workspace* workspace = nullptr;
};

}  // namespace parprims::cuda
