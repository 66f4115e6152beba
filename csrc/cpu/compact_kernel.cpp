// The CPU ops of the compaction family: compact, compact_capacity, _compact_backward,
// segmented_compact, pad and the offsets helpers. The device work is the compaction on the CPU
// engine (host/compact_dispatch.h); the rest is host/compact_host.cpp. Schemas:
// csrc/registration.cpp.
#include <torch/library.h>

#include <cstring>

#include "../host/compact_dispatch.h"
#include "../host/compact_host.h"
#include "../host/compact_registration.h"
#include "engine_cpu.h"

namespace parprims::cpu {
namespace {

// Fills `slots[count, capacity)` with the `bytes`-byte pattern `bits`.
void fill_tail(const at::Tensor& slots, int64_t count, const unsigned char* bits) {
  const int64_t capacity = slots.size(0);
  if (count >= capacity) return;
  const int64_t bytes = slots.element_size();
  auto* base = static_cast<unsigned char*>(slots.data_ptr());
  for (int64_t i = count; i < capacity; ++i) std::memcpy(base + i * bytes, bits, bytes);
}

void run_compact(host::PreparedCompact& c) {
  if (c.launch) host::dispatch_compact(c.call, Engine{});
  // On the CPU the count is already on the host: no synchronization to avoid.
  const int64_t count = c.count.item<int64_t>();
  if (!c.fill_past_count) return;
  if (c.values.defined()) fill_tail(c.values, count, c.fill.bytes);
  if (c.indices.defined()) {
    const int64_t minus_one = -1;
    fill_tail(c.indices, count, reinterpret_cast<const unsigned char*>(&minus_one));
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) { host::CompactOps<&run_compact>::register_kernels(m); }

}  // namespace parprims::cpu
