// Host side of the compaction family: compact (exact size and fixed capacity), its backward,
// segmented_compact, pad, and the packed-sequence offsets helpers. Device-independent.
//
// One kernel does the device work: the compaction of a flat bool mask on the scan engine
// (core/compact_problems.h), reached through a CompactRunner that each device's kernel file
// supplies (cpu/compact_kernel.cpp, cuda/compact_kernel.cpp). Everything else here is ATen and
// the library's own scan, with no host synchronization except where an op's size depends on
// the data (the exact-size forms).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

#include "common.h"
#include "compact_call.h"

namespace parprims::host {

// The compaction of one flat mask: slots [0, min(count, capacity)) receive the kept elements of
// `source` (and their positions) in order; the runner fills slots [count, capacity) of `values`
// with `fill` and of `indices` with -1, and writes `count`.
struct PreparedCompact {
  at::Tensor mask;     // 1-D contiguous bool: what the engine scans
  at::Tensor source;   // 1-D contiguous, or undefined when only positions are wanted
  at::Tensor values;   // (capacity,) of source's dtype; undefined without source
  at::Tensor indices;  // (capacity,) int64; undefined when not wanted
  at::Tensor count;    // 0-d int64 (zeroed when the mask is empty: nothing is launched)
  FillBits fill;       // fill_value's bits in the values' dtype
  bool launch = false;  // false for an empty mask
  bool fill_past_count = true;  // false when the capacity is known to be the count (exact forms)
  CompactCall call;     // set when `launch`
  // The device's count of this mask, where it keeps one (CUDA: the select's plan of keep bits
  // and first slots), set by the runner; a call on the same mask given an earlier call's plan
  // does not count again (the exact forms: count, read the count back, scatter).
  at::Tensor plan;
};

// The device part: the engine's scan-and-scatter, then the fill of the slots past the count.
using CompactRunner = void (*)(PreparedCompact&);

// The element types the compaction copies (by size): 1, 2, 4, 8 or 16 bytes.
bool compactable_element_size(int64_t bytes);

// The number of true entries of a 1-D contiguous bool tensor, read back to the host, and the
// runner's plan of the mask (PreparedCompact::plan) for a later call on it.
struct CountedMask {
  int64_t count = 0;
  at::Tensor plan;
};
CountedMask count_true(const at::Tensor& mask_flat, CompactRunner run);

PreparedCompact prepare_compact(const at::Tensor& source, const at::Tensor& mask_flat, int64_t capacity,
                                const at::Scalar& fill_value, bool want_indices);

// compact_capacity(x, mask, capacity, dim, fill_value, return_indices) -> (values, count, indices)
std::tuple<at::Tensor, at::Tensor, at::Tensor> compact_capacity(const at::Tensor& x, const at::Tensor& mask,
                                                                int64_t capacity, int64_t dim,
                                                                const at::Scalar& fill_value,
                                                                bool return_indices, CompactRunner run);

// compact(x, mask, dim, return_indices) -> (values, indices): reads the count back (a sync).
std::tuple<at::Tensor, at::Tensor> compact_exact(const at::Tensor& x, const at::Tensor& mask, int64_t dim,
                                                 bool return_indices, CompactRunner run);

// The gradient of compact with respect to x: grad_values back at the kept positions, zeros
// elsewhere (and at kept positions past the capacity).
at::Tensor compact_backward(const at::Tensor& grad_values, const at::Tensor& mask, int64_t dim);

// segmented_compact(x, mask, offsets, capacity, fill_value) -> (values, new_offsets)
std::tuple<at::Tensor, at::Tensor> segmented_compact(const at::Tensor& x, const at::Tensor& mask,
                                                     const at::Tensor& offsets,
                                                     std::optional<int64_t> capacity,
                                                     const at::Scalar& fill_value, CompactRunner run);

// pad(x, indices, batch, seqlen): packed rows back to their positions in a (batch, seqlen, ...)
// grid of zeros; indices outside [0, batch * seqlen) (the -1 of a capacity form) are dropped.
at::Tensor pad(const at::Tensor& x, const at::Tensor& indices, int64_t batch, int64_t seqlen);

// ---- offsets helpers ----
at::Tensor offsets_from_lengths(const at::Tensor& lengths, std::optional<at::ScalarType> dtype);
at::Tensor lengths_from_offsets(const at::Tensor& offsets);
at::Tensor offsets_from_flags(const at::Tensor& flags, std::optional<int64_t> capacity,
                              std::optional<at::ScalarType> dtype, CompactRunner run);
at::Tensor flags_from_offsets(const at::Tensor& offsets, int64_t total);
at::Tensor segment_ids_from_offsets(const at::Tensor& offsets, int64_t total);

}  // namespace parprims::host
