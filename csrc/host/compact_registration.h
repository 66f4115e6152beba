// The compaction family's kernel table, shared by the CPU and CUDA registrations: every op is
// device-independent host code (host/compact_host.cpp) around one device step, `Run`, the
// compaction itself (cpu/compact_kernel.cpp, cuda/compact_kernel.cpp).
#pragma once

#include <torch/library.h>

#include <optional>

#include "compact_host.h"

namespace parprims::host {

template <CompactRunner Run>
struct CompactOps {
  static std::tuple<at::Tensor, at::Tensor, at::Tensor> compact_capacity_op(
      const at::Tensor& x, const at::Tensor& mask, int64_t capacity, int64_t dim, const at::Scalar& fill_value,
      bool return_indices) {
    return compact_capacity(x, mask, capacity, dim, fill_value, return_indices, Run);
  }

  static std::tuple<at::Tensor, at::Tensor> compact_op(const at::Tensor& x, const at::Tensor& mask, int64_t dim,
                                                       bool return_indices) {
    return compact_exact(x, mask, dim, return_indices, Run);
  }

  static std::tuple<at::Tensor, at::Tensor> segmented_compact_op(const at::Tensor& x, const at::Tensor& mask,
                                                                 const at::Tensor& offsets,
                                                                 std::optional<int64_t> capacity,
                                                                 const at::Scalar& fill_value) {
    return segmented_compact(x, mask, offsets, capacity, fill_value, Run);
  }

  static at::Tensor offsets_from_flags_op(const at::Tensor& flags, std::optional<int64_t> capacity,
                                          std::optional<at::ScalarType> dtype) {
    return offsets_from_flags(flags, capacity, dtype, Run);
  }

  // Registers every compaction op for the library's dispatch key (schemas: registration.cpp).
  static void register_kernels(torch::Library& m) {
    m.impl("compact", &compact_op);
    m.impl("compact_capacity", &compact_capacity_op);
    m.impl("_compact_backward", &compact_backward);
    m.impl("segmented_compact", &segmented_compact_op);
    m.impl("pad", &pad);
    m.impl("offsets_from_lengths", &offsets_from_lengths);
    m.impl("lengths_from_offsets", &lengths_from_offsets);
    m.impl("offsets_from_flags", &offsets_from_flags_op);
    m.impl("flags_from_offsets", &flags_from_offsets);
    m.impl("segment_ids_from_offsets", &segment_ids_from_offsets);
  }
};

}  // namespace parprims::host
