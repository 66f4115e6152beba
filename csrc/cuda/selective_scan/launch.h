// The selective-scan kernel launches, one translation unit per direction (they compile in
// parallel): selective_scan_forward.cu and selective_scan_backward.cu. Host code includes it
// too (selective_scan_kernel.cpp): no device code here.
#pragma once

#include <c10/core/ScalarType.h>

#include "../../core/selective_scan.h"
#include "../engine/policy.cuh"
#include "../launch_context.h"

namespace parprims::cuda {

using Policy = SelectiveScanPolicy;
constexpr int kStates = Policy::kStatesPerThread;  // the backward's; the forward's is a template parameter

// The launch shape, decided on the host from N and dim (selective_scan_kernel.cpp).
struct SelectiveScanShape {
  int threads_per_channel = 1;  // a power of two <= 32
  int log2_threads_per_channel = 0;
  int channels_per_block = Policy::kThreads;
  int states_per_tile = kStates;  // threads_per_channel * states per thread
  int state_tiles = 1;            // > 1 only when N > 32 * states per thread
  int64_t blocks_per_group = 1;   // blocks over one group's channels
  int64_t channel_blocks = 1;     // batch * groups * blocks_per_group
  int64_t blocks = 1;             // channel_blocks * segments
  // Time segments, for rows too few to fill the GPU (long sequences, packed batches): every row
  // is cut into `segments` runs of segment_len steps, each walked by its own blocks. A summary
  // pass first gives every segment's end state from zero and the product of its gates (zero
  // past a sequence start), a combine pass turns them into the state entering every segment
  // (in place of segment_state), and the full pass starts each segment from it. The summary
  // skips the segment walked last (what it would give feeds nothing): it launches
  // channel_blocks fewer blocks, from first_block (channel_blocks in the backward, which walks
  // the first segment last).
  int64_t segments = 1;
  int64_t segment_len = 0;        // a multiple of kSegmentAlign; the whole row when segments == 1
  int64_t first_block = 0;        // the launch's first block in the (segments, channel blocks) order
  void* segment_state = nullptr;  // (segments, batch, dim, N), compute type
  void* segment_decay = nullptr;  // the same
  // Accumulators across state tiles ((batch, dim, L), compute type), when state_tiles > 1: the
  // channel's sums over states of y and (the backward's) l B and da A (BackwardShared).
  void* y_scratch = nullptr;
  void* lB_scratch = nullptr;
  void* daA_scratch = nullptr;
};

// The launch shape of the forward (backward) for a problem: threads per channel from N and
// the states each thread holds (Policy::kForwardStatesPerThread, kStatesPerThread), blocks
// over channels, and time segments when those blocks alone would leave most of the GPU idle
// (PARPRIMS_NO_TIME_SEGMENTS=1 turns segments off, to measure what they bring;
// PARPRIMS_TIME_SEGMENTS=k asks for k segments a row).
SelectiveScanShape selective_scan_forward_shape(const SelectiveScanParams& p, c10::ScalarType input_dtype,
                                                const LaunchContext& ctx);
SelectiveScanShape selective_scan_backward_shape(const SelectiveScanParams& p, c10::ScalarType input_dtype,
                                                 const LaunchContext& ctx);

// The shape over channels alone (at most `max_threads_per_channel` threads a channel; larger N
// is walked in state tiles), and the time segments added to it for `resident` blocks running
// at once (selective_scan_forward.cu).
SelectiveScanShape selective_scan_channel_shape(const SelectiveScanParams& p, int states_per_thread,
                                                int max_threads_per_channel = Policy::kMaxThreadsPerChannel);
void add_time_segments(SelectiveScanShape& s, const SelectiveScanParams& p, int64_t resident);

// `input_dtype` is u's dtype; the scratch accumulators of `shape` must be set when
// shape.state_tiles > 1.
void launch_selective_scan_forward(const SelectiveScanParams& p, const SelectiveScanShape& shape,
                                   c10::ScalarType input_dtype, const LaunchContext& ctx);
// The kernel, then the pass that adds its partial sums into `totals`.
void launch_selective_scan_backward(const SelectiveScanParams& p, const SelectiveScanGrads& grads,
                                    const SelectiveScanGradTotals& totals, const SelectiveScanShape& shape,
                                    c10::ScalarType input_dtype, const LaunchContext& ctx);

}  // namespace parprims::cuda
