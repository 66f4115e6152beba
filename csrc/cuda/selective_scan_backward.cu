// Instantiations of the fused selective-scan backward (selective_scan/backward.cuh) and of the
// pass that adds its partial sums (selective_scan/backward_sums.cuh).
#include "selective_scan/backward.cuh"
#include "selective_scan/backward_sums.cuh"
#include "selective_scan/dispatch.cuh"

namespace parprims::cuda {

SelectiveScanShape selective_scan_backward_shape(const SelectiveScanParams& p, c10::ScalarType input_dtype,
                                                 const LaunchContext& ctx) {
  // In double, tiles of at most 64 states keep the block's shared memory (the warps' dB/dC
  // sums grow with the tile) within what an SM offers.
  const int max_threads_per_channel = input_dtype == c10::kDouble ? 16 : Policy::kMaxThreadsPerChannel;
  auto s = selective_scan_channel_shape(p, Policy::kStatesPerThread, max_threads_per_channel);
  visit_selective_scan_types(input_dtype, [&](auto in, auto acc) {
    using In = decltype(in);
    using Acc = decltype(acc);
    const size_t smem = BackwardChunk<In, Acc>::smem_bytes(s, p.B.variable, p.C.variable);
    add_time_segments(s, p, resident_blocks(ctx, selective_scan_backward_kernel<In, Acc, false, false>, smem));
  });
  return s;
}

void launch_selective_scan_backward(const SelectiveScanParams& p, const SelectiveScanGrads& grads,
                                    const SelectiveScanGradTotals& totals, const SelectiveScanShape& shape,
                                    c10::ScalarType input_dtype, const LaunchContext& ctx) {
  visit_selective_scan_types(input_dtype, [&](auto in, auto acc) {
    using In = decltype(in);
    using Acc = decltype(acc);
    const size_t smem = BackwardChunk<In, Acc>::smem_bytes(shape, p.B.variable, p.C.variable);
    // Mamba's case, B and C both variable, gets a kernel without the per-step choices, and at
    // N = 16 (four threads a channel) one whose per-step sums have no branches, reading two
    // time steps an item where the inputs and gradients allow it (steps_in_pairs).
    auto full = selective_scan_backward_kernel<In, Acc, false, false>;
    if (p.B.variable && p.C.variable) {
      full = selective_scan_backward_kernel<In, Acc, true, false>;
      if constexpr (sizeof(Acc) == 4) {
        if (shape.threads_per_channel == 4 && shape.state_tiles == 1) {
          full = steps_in_pairs<In>(p, grads) ? selective_scan_backward_kernel<In, Acc, true, false, 4, 2>
                                              : selective_scan_backward_kernel<In, Acc, true, false, 4>;
        }
      }
    }
    run_time_segments<Acc>(
        ctx, shape, p, /*reverse=*/true,
        [&](const SelectiveScanShape& s) {
          launch_blocks(ctx, selective_scan_backward_kernel<In, Acc, false, true>, smem, s.blocks, p, grads, s);
        },
        [&](const SelectiveScanShape& s) {
          launch_blocks(ctx, full, smem, s.blocks, p, grads, s);
        });
    launch_blocks(ctx, selective_scan_backward_sums_kernel<In, Acc>, 0, backward_sum_tasks(p, shape), p, grads,
                  totals, shape);
  });
}

}  // namespace parprims::cuda
