// The CUDA ops of the compaction family: compact, compact_capacity, _compact_backward,
// segmented_compact, pad and the offsets helpers. The device work is the select kernel
// (engine/select.cuh) and the fill of the slots past the count, which reads the count on the
// device: no host synchronization (compact_scatter.cu). The rest is host/compact_host.cpp.
// Host code only. Schemas: csrc/registration.cpp.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstring>

#include "../host/compact_host.h"
#include "../host/compact_registration.h"
#include "compact_instantiations.h"
#include "launch_scope.h"

namespace parprims::cuda {
namespace {

// The select's plan (keep bits, first slots) is kept in `c.plan` for a later call on the mask.
// When the select runs, its scatter fills the slots past the count; an empty mask launches
// nothing, and its slots are filled here.
void run_compact(host::PreparedCompact& c) {
  const LaunchScope scope(c.count);
  const auto& ctx = scope.context();
  if (c.launch) {
    const bool counted = c.plan.defined();
    if (!counted) c.plan = at::empty({select_plan_bytes(c.call.geometry.len)}, c.mask.options().dtype(at::kByte));
    compact_select(c.call, c.plan.data_ptr(), counted, c.fill_past_count ? &c.fill : nullptr, ctx);
    return;
  }
  if (!c.fill_past_count) return;
  if (c.values.defined()) {
    fill_tail(c.values.data_ptr(), c.values.element_size(), c.values.size(0), c.call.count, c.fill, ctx);
  }
  if (c.indices.defined()) {
    FillBits minus_one;
    const int64_t value = -1;
    std::memcpy(minus_one.bytes, &value, sizeof(value));
    fill_tail(c.indices.data_ptr(), sizeof(int64_t), c.indices.size(0), c.call.count, minus_one, ctx);
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) { host::CompactOps<&run_compact>::register_kernels(m); }

}  // namespace parprims::cuda
