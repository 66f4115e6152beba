// CUDA kernels of the compaction (see compact_instantiations.h): the select kernels
// (engine/select.cuh) and the fill of the slots past the count.
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "../host/compact_dispatch.h"
#include "compact_instantiations.h"
#include "engine/select.cuh"

namespace parprims::cuda {
namespace {

constexpr int kFillThreads = 256;
constexpr int64_t kMaxFillBlocks = 4096;  // grid-stride beyond this

// The passes of engine/select.cuh: the count and the block slots (unless `counted`: the plan
// already holds them for this mask), then the scatter, only when values or positions are wanted,
// which also fills the slots past the count when `fill` is given.
template <class Word>
void launch_select(const host::CompactCall& c, void* plan_memory, bool counted, const FillBits* fill,
                   const LaunchContext& ctx) {
  using K = SelectScatter<Word>;
  SelectCall<Word> call{host::typed_arrays<Word>(c)};
  call.n = c.geometry.len;
  if (fill != nullptr) {
    call.fill_past_count = true;
    std::memcpy(&call.fill, fill->bytes, sizeof(Word));
  }
  const SelectPlan plan = SelectPlan::at(static_cast<unsigned char*>(plan_memory), call.n);
  if (!counted) {
    const int64_t blocks = SelectPlan::count_blocks(call.n);
    TORCH_CHECK(blocks <= 0x7fffffff, "mask: too many elements (", call.n, ")");
    select_count_kernel<<<static_cast<unsigned>(blocks), 32 * kCountWarps, 0, ctx.stream>>>(call.mask, call.n, plan);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    launch_after(select_block_slots_kernel, 1, kSlotsThreads, ctx, blocks, plan, call.count);
  }
  if (call.values == nullptr && call.indices == nullptr) return;  // the count alone
  // The policy's blocks per SM need more shared memory than the default carveout gives.
  static const bool carveout_set = [] {
    C10_CUDA_CHECK(cudaFuncSetAttribute(select_scatter_kernel<Word>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)carveout_set;
  // Enough blocks for the tiles, and for a fill of up to `capacity` slots at a tile's worth each.
  const int64_t tiles = (call.n + K::kTile - 1) / K::kTile;
  const int64_t fill_blocks = fill != nullptr ? (call.capacity + K::kTile - 1) / K::kTile : 0;
  const int64_t blocks = std::max(tiles, fill_blocks);
  TORCH_CHECK(blocks <= 0x7fffffff, "compact: too many elements (", call.n, ") or slots (", call.capacity, ")");
  if (counted) {
    // The kernel before it in the stream is not the select's: launched plainly, so that the
    // elements it reads before its wait for the plan are complete.
    select_scatter_kernel<Word><<<static_cast<unsigned>(blocks), K::kThreads, 0, ctx.stream>>>(call, plan);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  } else {
    launch_after(select_scatter_kernel<Word>, static_cast<unsigned>(blocks), K::kThreads, ctx, call, plan);
  }
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

int64_t select_plan_bytes(int64_t n) { return SelectPlan::bytes(n); }

void compact_select(const host::CompactCall& c, void* plan, bool counted, const FillBits* fill,
                    const LaunchContext& ctx) {
  host::with_compact_word(c.element_bytes, [&](auto tag) {
    launch_select<typename decltype(tag)::type>(c, plan, counted, fill, ctx);
  });
}

void fill_tail(void* slots, int64_t element_bytes, int64_t capacity, const int64_t* count, const FillBits& bits,
               const LaunchContext& ctx) {
  if (capacity == 0) return;
  host::with_compact_word(element_bytes, [&](auto tag) {
    launch_fill_tail<typename decltype(tag)::type>(slots, capacity, count, bits, ctx);
  });
}

}  // namespace parprims::cuda
