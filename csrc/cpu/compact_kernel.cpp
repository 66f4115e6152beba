// The CPU ops of the compaction family: compact, compact_capacity, _compact_backward,
// segmented_compact, pad and the offsets helpers. The device work is the compaction on the CPU
// engine (host/compact_dispatch.h); the rest is host/compact_host.cpp. Schemas:
// csrc/registration.cpp.
#include <torch/library.h>

#include <cstring>

#include "../host/compact_dispatch.h"
#include "../host/compact_host.h"
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

void run_compact(const host::PreparedCompact& c) {
  host::dispatch_compact(c, Engine{});
  // On the CPU the count is already on the host: no synchronization to avoid.
  const int64_t count = c.count.item<int64_t>();
  if (c.values.defined()) fill_tail(c.values, count, c.fill.bytes);
  if (c.indices.defined()) {
    const int64_t minus_one = -1;
    fill_tail(c.indices, count, reinterpret_cast<const unsigned char*>(&minus_one));
  }
}

using OptInt = std::optional<int64_t>;
using OptDtype = std::optional<at::ScalarType>;

std::tuple<at::Tensor, at::Tensor, at::Tensor> compact_capacity_op(const at::Tensor& x, const at::Tensor& mask,
                                                                   int64_t capacity, int64_t dim,
                                                                   const at::Scalar& fill_value,
                                                                   bool return_indices) {
  return host::compact_capacity(x, mask, capacity, dim, fill_value, return_indices, &run_compact);
}

std::tuple<at::Tensor, at::Tensor> compact_op(const at::Tensor& x, const at::Tensor& mask, int64_t dim,
                                              bool return_indices) {
  return host::compact_exact(x, mask, dim, return_indices, &run_compact);
}

std::tuple<at::Tensor, at::Tensor> segmented_compact_op(const at::Tensor& x, const at::Tensor& mask,
                                                        const at::Tensor& offsets, OptInt capacity,
                                                        const at::Scalar& fill_value) {
  return host::segmented_compact(x, mask, offsets, capacity, fill_value, &run_compact);
}

at::Tensor offsets_from_flags_op(const at::Tensor& flags, OptInt capacity, OptDtype dtype) {
  return host::offsets_from_flags(flags, capacity, dtype, &run_compact);
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) {
  m.impl("compact", &compact_op);
  m.impl("compact_capacity", &compact_capacity_op);
  m.impl("_compact_backward", &host::compact_backward);
  m.impl("segmented_compact", &segmented_compact_op);
  m.impl("pad", &host::pad);
  m.impl("offsets_from_lengths", &host::offsets_from_lengths);
  m.impl("lengths_from_offsets", &host::lengths_from_offsets);
  m.impl("offsets_from_flags", &offsets_from_flags_op);
  m.impl("flags_from_offsets", &host::flags_from_offsets);
  m.impl("segment_ids_from_offsets", &host::segment_ids_from_offsets);
}

}  // namespace parprims::cpu
