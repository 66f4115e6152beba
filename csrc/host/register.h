// The dispatcher entry points of every op, written once: each device's kernel file supplies
// its backends and registers these under its dispatch key.
#pragma once

#include <torch/library.h>

#include <string>

#include "affine_ops.h"
#include "scan_ops.h"

namespace parprims::host {

using OptTensor = c10::optional<at::Tensor>;

template <const ScanBackend& (*Backend)()>
struct ScanEntryPoints {
  static at::Tensor scan(const at::Tensor& x, int64_t dim, c10::string_view op, bool exclusive, bool reverse) {
    return host::scan(Backend(), x, c10::nullopt, dim, std::string(op), exclusive, reverse);
  }
  static at::Tensor segmented_scan(const at::Tensor& x, const at::Tensor& offsets, int64_t dim,
                                   c10::string_view op, bool exclusive, bool reverse) {
    return host::scan(Backend(), x, offsets, dim, std::string(op), exclusive, reverse);
  }
  static std::tuple<at::Tensor, at::Tensor> with_indices(const at::Tensor& x, const OptTensor& offsets,
                                                         int64_t dim, c10::string_view op, bool exclusive,
                                                         bool reverse) {
    return host::scan_with_indices(Backend(), x, offsets, dim, std::string(op), exclusive, reverse);
  }
  static std::tuple<at::Tensor, at::Tensor> bicyclic(const at::Tensor& p, const at::Tensor& q,
                                                     const OptTensor& offsets, int64_t dim, bool exclusive,
                                                     bool reverse) {
    return host::scan_bicyclic(Backend(), p, q, offsets, dim, exclusive, reverse);
  }
  static void define(torch::Library& m) {
    m.impl("scan", &scan);
    m.impl("segmented_scan", &segmented_scan);
    m.impl("_scan_with_indices", &with_indices);
    m.impl("_scan_bicyclic", &bicyclic);
  }
};

template <const AffineBackend& (*Backend)()>
struct AffineEntryPoints {
  template <bool kExclusive>
  static std::tuple<at::Tensor, at::Tensor> affine(const at::Tensor& a, const at::Tensor& b, int64_t dim,
                                                   const OptTensor& initial_state, const OptTensor& offsets,
                                                   bool reverse, bool log_gates) {
    return host::affine_scan(Backend(), a, b, dim, initial_state, offsets, reverse, log_gates, kExclusive);
  }
  template <bool kExclusive>
  static std::tuple<at::Tensor, at::Tensor> matrix(const at::Tensor& A, const at::Tensor& b, int64_t dim,
                                                   const OptTensor& initial_state, const OptTensor& offsets,
                                                   bool reverse) {
    return host::matrix_affine_scan(Backend(), A, b, dim, initial_state, offsets, reverse, kExclusive);
  }
  static void define(torch::Library& m) {
    m.impl("affine_scan", &affine<false>);
    m.impl("_affine_scan_exclusive", &affine<true>);
    m.impl("matrix_affine_scan", &matrix<false>);
    m.impl("_matrix_affine_scan_exclusive", &matrix<true>);
  }
};

}  // namespace parprims::host
