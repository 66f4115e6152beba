// CUDA kernels of the compaction (see compact_instantiations.h).
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstring>

#include "../host/compact_dispatch.h"
#include "compact_instantiations.h"
#include "engine/engine.cuh"

namespace parprims::cuda {
namespace {

constexpr int kFillThreads = 256;
constexpr int64_t kMaxFillBlocks = 4096;  // grid-stride beyond this

template <class Word>
__global__ void __launch_bounds__(kFillThreads)
    fill_tail_kernel(Word* slots, const int64_t* count, int64_t capacity, Word fill) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kFillThreads;
  const int64_t first = *count + static_cast<int64_t>(blockIdx.x) * kFillThreads + threadIdx.x;
  for (int64_t i = first; i < capacity; i += stride) slots[i] = fill;
}

template <class Word>
void launch_fill_tail(void* slots, int64_t capacity, const int64_t* count, const FillBits& bits,
                      const LaunchContext& ctx) {
  Word fill;
  std::memcpy(&fill, bits.bytes, sizeof(Word));
  const int64_t blocks = std::min<int64_t>((capacity + kFillThreads - 1) / kFillThreads, kMaxFillBlocks);
  fill_tail_kernel<Word><<<static_cast<unsigned>(blocks), kFillThreads, 0, ctx.stream>>>(static_cast<Word*>(slots),
                                                                                       count, capacity, fill);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void compact_scatter(const host::CompactCall& c, const LaunchContext& ctx) { host::dispatch_compact(c, Engine{ctx}); }

void fill_tail(void* slots, int64_t element_bytes, int64_t capacity, const int64_t* count, const FillBits& bits,
               const LaunchContext& ctx) {
  if (capacity == 0) return;
  switch (element_bytes) {
    case 1: return launch_fill_tail<CompactWord<1>>(slots, capacity, count, bits, ctx);
    case 2: return launch_fill_tail<CompactWord<2>>(slots, capacity, count, bits, ctx);
    case 4: return launch_fill_tail<CompactWord<4>>(slots, capacity, count, bits, ctx);
    case 8: return launch_fill_tail<CompactWord<8>>(slots, capacity, count, bits, ctx);
    case 16: return launch_fill_tail<CompactWord<16>>(slots, capacity, count, bits, ctx);
    default: TORCH_CHECK(false, "x: elements of ", element_bytes, " bytes are not supported");
  }
}

}  // namespace parprims::cuda
