// The selective-scan kernel launches, one translation unit per direction (they compile in
// parallel): selective_scan_forward.cu and selective_scan_backward.cu.
#pragma once

#include <ATen/ATen.h>

#include "../../core/selective_scan.h"
#include "common.cuh"

namespace parprims::cuda {

// The launch shape for a problem (threads per channel from N and the states each thread
// holds: Policy::kForwardStatesPerThread for the forward, kStatesPerThread for the backward;
// blocks over channels).
SelectiveScanShape selective_scan_shape(const SelectiveScanParams& p, int states_per_thread);

// `input_dtype` is u's dtype; the scratch accumulators of `shape` must be set when
// shape.state_tiles > 1.
void launch_selective_scan_forward(const SelectiveScanParams& p, const SelectiveScanShape& shape,
                                   at::ScalarType input_dtype);
void launch_selective_scan_backward(const SelectiveScanParams& p, const SelectiveScanGrads& grads,
                                    const SelectiveScanShape& shape, at::ScalarType input_dtype);

}  // namespace parprims::cuda
