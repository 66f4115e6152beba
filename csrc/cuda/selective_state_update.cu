// CUDA kernel of selective_state_update. A row (batch b, head h, channel p) belongs to a team of
// `lanes` threads of one warp (the power of two >= N, at most 32): lane l updates the states
// n = l, l + lanes, ... in place through their strides (consecutive n of a contiguous state are
// consecutive addresses), and the team sums C * state with shuffles. A 1-D grid walks the rows
// with a grid-stride loop (64-bit row indices; no limit from the grid's y/z sizes).
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <type_traits>

#include "../host/scan_dispatch.h"
#include "selective_state_update.h"

namespace parprims::cuda {
namespace {

constexpr int kThreads = 128;

template <class In, class BC, class Acc>
__global__ void __launch_bounds__(kThreads)
    state_update_kernel(const __grid_constant__ SelectiveStateUpdateParams p, int lanes_log2) {
  const int lanes = 1 << lanes_log2;
  const int lane = threadIdx.x & (lanes - 1);
  const int64_t rows_per_block = kThreads >> lanes_log2;
  const int64_t team = threadIdx.x >> lanes_log2;
  const int64_t rows = p.rows();
  // The loop's condition is the same for the whole block: every lane of a warp reaches the
  // shuffles, those of rows past the end with zeros.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * rows_per_block; base < rows;
       base += static_cast<int64_t>(gridDim.x) * rows_per_block) {
    const int64_t row = base + team;
    const bool active = row < rows;
    const StateUpdateRow<In, BC, Acc> r(p, active ? row : 0);
    Acc y = Acc(0);
    if (active) {
      for (int64_t n = lane; n < p.dstate; n += lanes) y += r.update(n);
    }
    for (int offset = lanes >> 1; offset > 0; offset >>= 1) y += __shfl_xor_sync(0xffffffffu, y, offset, lanes);
    if (active && lane == 0) r.finish(y);
  }
}

template <class In, class BC, class Acc>
void launch(const SelectiveStateUpdateParams& p, const LaunchContext& ctx) {
  int lanes_log2 = 0;
  while ((int64_t{1} << lanes_log2) < p.dstate && lanes_log2 < 5) ++lanes_log2;
  const int64_t rows_per_block = kThreads >> lanes_log2;
  const int64_t wanted = (p.rows() + rows_per_block - 1) / rows_per_block;
  const int64_t most = int64_t{ctx.sm_count} * 32;
  const auto blocks = static_cast<unsigned>(std::max<int64_t>(1, std::min(wanted, most)));
  state_update_kernel<In, BC, Acc><<<blocks, kThreads, 0, ctx.stream>>>(p, lanes_log2);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void launch_selective_state_update(const SelectiveStateUpdateParams& p, c10::ScalarType input,
                                   c10::ScalarType bc, const LaunchContext& ctx) {
  host::visit_floating(input, [&](auto tag) {
    using In = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<In, double>, double, float>;
    if constexpr (std::is_same_v<In, Acc>) {
      launch<In, In, Acc>(p, ctx);
    } else if (bc == c10::kFloat) {  // half inputs with float32 B and C
      launch<In, float, Acc>(p, ctx);
    } else {
      launch<In, In, Acc>(p, ctx);
    }
  });
}

}  // namespace parprims::cuda
