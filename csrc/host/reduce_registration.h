// The reduction family's kernel table, shared by the CPU and CUDA registrations: every op is
// device-independent host code (host/reduce_host.cpp) around one device step, `Reduce` (the
// scan engine's reduction) or `Histogram` (cpu/reduce_kernel.cpp, cuda/reduce_kernel.cpp).
#pragma once

#include <torch/library.h>

#include <optional>

#include "reduce_host.h"

namespace parprims::host {

template <ReduceRunner Reduce, HistogramRunner Histogram>
struct ReduceOps {
  static at::Tensor segment_reduce_op(const at::Tensor& x, const at::Tensor& offsets, c10::string_view op,
                                      int64_t dim) {
    return segment_reduce(x, offsets, op, dim, Reduce);
  }

  static at::Tensor reduce_op(const at::Tensor& x, int64_t dim, c10::string_view op,
                              const std::optional<at::Tensor>& mask, bool keepdim) {
    return reduce(x, dim, op, mask, keepdim, Reduce);
  }

  static at::Tensor histogram_op(const at::Tensor& x, int64_t bins, double lo, double hi,
                                 const std::optional<at::Tensor>& weights, const std::optional<at::Tensor>& offsets) {
    return histogram(x, bins, lo, hi, weights, offsets, Histogram);
  }

  static at::Tensor histogram_bin_index_op(const at::Tensor& x, int64_t bins, double lo, double hi,
                                           const std::optional<at::Tensor>& offsets) {
    return histogram_bin_index(x, bins, lo, hi, offsets, Histogram);
  }

  // Registers every reduction op for the library's dispatch key (schemas: registration.cpp).
  static void register_kernels(torch::Library& m) {
    m.impl("segment_reduce", &segment_reduce_op);
    m.impl("reduce", &reduce_op);
    m.impl("histogram", &histogram_op);
    m.impl("_histogram_bin_index", &histogram_bin_index_op);
  }
};

}  // namespace parprims::host
