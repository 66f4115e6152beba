// The CUDA instantiation of the compaction on the scan engine (compact_scatter.cu), in its own
// translation unit so that the build compiles it in parallel with compact_kernel.cu.
#pragma once

#include "../host/compact_host.h"

namespace parprims::cuda {

// The engine's scan of the keep flags with the scatter of the kept elements (and positions)
// and the count; slots past the count are left to the caller.
void compact_scatter(const host::PreparedCompact& c);

}  // namespace parprims::cuda
