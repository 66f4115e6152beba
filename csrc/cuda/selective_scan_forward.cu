// Instantiations of the fused selective-scan forward (selective_scan/forward.cuh).
#include "selective_scan/dispatch.cuh"
#include "selective_scan/forward.cuh"

namespace parprims::cuda {

SelectiveScanShape selective_scan_shape(const SelectiveScanParams& p, int states_per_thread) {
  SelectiveScanShape s;
  while (s.threads_per_channel * states_per_thread < p.dstate && s.threads_per_channel < Policy::kMaxThreadsPerChannel) {
    s.threads_per_channel *= 2;
    ++s.log2_threads_per_channel;
  }
  s.channels_per_block = Policy::kThreads / s.threads_per_channel;
  s.states_per_tile = s.threads_per_channel * states_per_thread;
  s.state_tiles = static_cast<int>((p.dstate + s.states_per_tile - 1) / s.states_per_tile);
  s.blocks_per_group = (p.dim_per_group + s.channels_per_block - 1) / s.channels_per_block;
  s.blocks = p.batch * p.groups * s.blocks_per_group;
  return s;
}

void launch_selective_scan_forward(const SelectiveScanParams& p, const SelectiveScanShape& s,
                                   at::ScalarType input_dtype) {
  visit_selective_scan_types(input_dtype, [&](auto in, auto acc) {
    using In = decltype(in);
    using Acc = decltype(acc);
    const size_t smem = ForwardChunk<In, Acc>::smem_bytes(s, p.B.variable, p.C.variable);
    // Mamba's case, B and C both variable, gets a kernel without the per-step choice.
    if (p.B.variable && p.C.variable) {
      launch_blocks(selective_scan_forward_kernel<In, Acc, true>, smem, s.blocks, p, s);
    } else {
      launch_blocks(selective_scan_forward_kernel<In, Acc, false>, smem, s.blocks, p, s);
    }
  });
}

}  // namespace parprims::cuda
