// CUDA kernels of the compaction (see compact_instantiations.h): the select kernel
// (engine/select.cuh) and the fill of the slots past the count.
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstring>

#include "../host/compact_dispatch.h"
#include "compact_instantiations.h"
#include "engine/select.cuh"

namespace parprims::cuda {
namespace {

constexpr int kFillThreads = 256;
constexpr int64_t kMaxFillBlocks = 4096;  // grid-stride beyond this

template <class Word>
void launch_select(const host::CompactCall& c, const LaunchContext& ctx) {
  using K = SelectFlagged<Word>;
  SelectCall<Word> call{host::typed_arrays<Word>(c)};
  call.n = c.geometry.len;
  const int64_t tiles = (call.n + K::kTile - 1) / K::kTile;
  TORCH_CHECK(tiles <= 0x7fffffff, "mask: too many elements (", call.n, ")");
  // The policy's blocks per SM need more shared memory than the default carveout gives.
  static const bool carveout_set = [] {
    C10_CUDA_CHECK(cudaFuncSetAttribute(select_flagged_kernel<Word>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)carveout_set;
  // A single tile looks back at nothing: no workspace, no memset.
  CountTileState state;
  if (tiles > 1) {
    void* memory = ctx.workspace->allocate(CountTileState::bytes(tiles));
    C10_CUDA_CHECK(cudaMemsetAsync(memory, 0, CountTileState::bytes(tiles), ctx.stream));
    state = CountTileState::at(memory);
  }
  select_flagged_kernel<Word><<<static_cast<unsigned>(tiles), K::kThreads, 0, ctx.stream>>>(call, state, tiles);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

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

void compact_scatter(const host::CompactCall& c, const LaunchContext& ctx) {
  host::with_compact_word(c.element_bytes, [&](auto tag) { launch_select<typename decltype(tag)::type>(c, ctx); });
}

void fill_tail(void* slots, int64_t element_bytes, int64_t capacity, const int64_t* count, const FillBits& bits,
               const LaunchContext& ctx) {
  if (capacity == 0) return;
  host::with_compact_word(element_bytes, [&](auto tag) {
    launch_fill_tail<typename decltype(tag)::type>(slots, capacity, count, bits, ctx);
  });
}

}  // namespace parprims::cuda
