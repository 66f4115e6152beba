// The CUDA kernels of the compaction (compact_scatter.cu), in their own translation unit so
// that the build compiles them in parallel with the rest; compact_kernel.cpp holds the ops.
#pragma once

#include "../host/compact_call.h"
#include "launch_context.h"

namespace parprims::cuda {

// The bytes of the select's plan of a mask of n positions (engine/select.cuh: its keep bits and
// first output slots), device memory aligned to 16 bytes.
int64_t select_plan_bytes(int64_t n);

// The select (engine/select.cuh): the kept elements (and positions) in order, and the count.
// `plan` is select_plan_bytes(n) of device memory; `counted`: it already holds the plan of this
// mask (an earlier call's), so only the scatter runs. `fill`: the scatter also fills the slots
// past the count (values with its bits, indices with -1); nullptr leaves them as they are.
void compact_select(const host::CompactCall& c, void* plan, bool counted, const FillBits* fill,
                    const LaunchContext& ctx);

// slots[i] = the `element_bytes`-byte pattern `bits` for i in [*count, capacity): the count is
// only known on the device, so nothing is read back.
void fill_tail(void* slots, int64_t element_bytes, int64_t capacity, const int64_t* count, const FillBits& bits,
               const LaunchContext& ctx);

}  // namespace parprims::cuda
