// The CUDA kernel of selective_state_update (selective_state_update.cu), called by its op
// (selective_state_update_kernel.cpp).
#pragma once

#include <c10/core/ScalarType.h>

#include "../core/selective_state_update.h"
#include "launch_context.h"

namespace parprims::cuda {

// One decode step in place on p's state: `input` is x's dtype, `bc` B's and C's (float32 B and
// C may come with half inputs).
void launch_selective_state_update(const SelectiveStateUpdateParams& p, c10::ScalarType input,
                                   c10::ScalarType bc, const LaunchContext& ctx);

}  // namespace parprims::cuda
