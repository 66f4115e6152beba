// The selective-scan kernel launches, one translation unit per direction (they compile in
// parallel): selective_scan_forward.cu and selective_scan_backward.cu.
#pragma once

#include <ATen/core/Tensor.h>

#include "../../core/selective_scan.h"
#include "common.cuh"

namespace parprims::cuda {

// The launch shape of the forward (backward) for a problem: threads per channel from N and
// the states each thread holds (Policy::kForwardStatesPerThread, kStatesPerThread), blocks
// over channels, and time segments when those blocks alone would leave most of the GPU idle
// (PARPRIMS_NO_TIME_SEGMENTS=1 turns segments off, to measure what they bring).
SelectiveScanShape selective_scan_forward_shape(const SelectiveScanParams& p, at::ScalarType input_dtype);
SelectiveScanShape selective_scan_backward_shape(const SelectiveScanParams& p, at::ScalarType input_dtype);

// The shape over channels alone, and the time segments added to it for `resident` blocks
// running at once (selective_scan_forward.cu).
SelectiveScanShape selective_scan_channel_shape(const SelectiveScanParams& p, int states_per_thread);
void add_time_segments(SelectiveScanShape& s, const SelectiveScanParams& p, int64_t resident);

// `input_dtype` is u's dtype; the scratch accumulators of `shape` must be set when
// shape.state_tiles > 1.
void launch_selective_scan_forward(const SelectiveScanParams& p, const SelectiveScanShape& shape,
                                   at::ScalarType input_dtype);
void launch_selective_scan_backward(const SelectiveScanParams& p, const SelectiveScanGrads& grads,
                                    const SelectiveScanShape& shape, at::ScalarType input_dtype);

}  // namespace parprims::cuda
