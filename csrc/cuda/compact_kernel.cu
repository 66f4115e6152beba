// The CUDA ops of the compaction family: compact, compact_capacity, _compact_backward,
// segmented_compact, pad and the offsets helpers. The device work is the compaction on the
// CUDA scan engine (compact_scatter.cu) and the fill of the slots past the count, which reads
// the count on the device: no host synchronization. The rest is host/compact_host.cpp.
// Schemas: csrc/registration.cpp.
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>

#include "../host/compact_host.h"
#include "../host/compact_registration.h"
#include "compact_instantiations.h"

namespace parprims::cuda {
namespace {

constexpr int kFillThreads = 256;
constexpr int64_t kMaxFillBlocks = 4096;  // grid-stride beyond this

// slots[i] = fill for i in [*count, capacity): the tail is only known on the device.
template <class Word>
__global__ void __launch_bounds__(kFillThreads)
    fill_tail_kernel(Word* slots, const int64_t* count, int64_t capacity, Word fill) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kFillThreads;
  const int64_t first = *count + static_cast<int64_t>(blockIdx.x) * kFillThreads + threadIdx.x;
  for (int64_t i = first; i < capacity; i += stride) slots[i] = fill;
}

template <class Word>
void launch_fill_tail(const at::Tensor& slots, const at::Tensor& count, const unsigned char* bits) {
  const int64_t capacity = slots.size(0);
  if (capacity == 0) return;
  Word fill;
  std::memcpy(&fill, bits, sizeof(Word));
  const int64_t blocks = std::min<int64_t>((capacity + kFillThreads - 1) / kFillThreads, kMaxFillBlocks);
  fill_tail_kernel<Word><<<static_cast<unsigned>(blocks), kFillThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      static_cast<Word*>(slots.data_ptr()), count.const_data_ptr<int64_t>(), capacity, fill);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void fill_tail(const at::Tensor& slots, const at::Tensor& count, const unsigned char* bits) {
  switch (slots.element_size()) {
    case 1: return launch_fill_tail<CompactWord<1>>(slots, count, bits);
    case 2: return launch_fill_tail<CompactWord<2>>(slots, count, bits);
    case 4: return launch_fill_tail<CompactWord<4>>(slots, count, bits);
    case 8: return launch_fill_tail<CompactWord<8>>(slots, count, bits);
    case 16: return launch_fill_tail<CompactWord<16>>(slots, count, bits);
    default: TORCH_CHECK(false, "x: elements of ", slots.element_size(), " bytes are not supported");
  }
}

void run_compact(const host::PreparedCompact& c) {
  const c10::cuda::CUDAGuard guard(c.count.device());
  compact_scatter(c);
  if (c.values.defined()) fill_tail(c.values, c.count, c.fill.bytes);
  if (c.indices.defined()) {
    const int64_t minus_one = -1;
    fill_tail(c.indices, c.count, reinterpret_cast<const unsigned char*>(&minus_one));
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) { host::CompactOps<&run_compact>::register_kernels(m); }

}  // namespace parprims::cuda
