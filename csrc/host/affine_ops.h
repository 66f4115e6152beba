// Host logic of the affine recurrences, shared by CPU and CUDA: checks, broadcasting (as
// strided views, never materialized), state shapes, output allocation.
#pragma once

#include <ATen/ATen.h>

#include <tuple>

#include "../core/scan_geometry.h"

namespace parprims::host {

// Tensors ready for an engine: `a` expanded to `b`'s shape; states contiguous (segments, rows).
struct AffineArgs {
  at::Tensor a, b, h;
  at::Tensor initial;      // undefined for zeros
  at::Tensor final_state;  // always allocated
  int64_t dim = 0;
  int64_t rows = 0;
  bool log_gates = false;
};

// The matrix form: A (..., L, d, d), b and h (..., L, d); `dim` indexes b without its last dim.
struct MatrixAffineArgs {
  at::Tensor A, b, h, initial, final_state;
  int64_t dim = 0;
  int64_t rows = 0;
  int64_t d = 0;
};

using AffineFn = void (*)(const AffineArgs& args, const ScanGeometry& g);
using MatrixAffineFn = void (*)(const MatrixAffineArgs& args, const ScanGeometry& g);

struct AffineBackend {
  AffineFn affine;
  MatrixAffineFn matrix;
  bool always_validate_offsets;
};

std::tuple<at::Tensor, at::Tensor> affine_scan(const AffineBackend& be, const at::Tensor& a,
                                               const at::Tensor& b, int64_t dim,
                                               const c10::optional<at::Tensor>& initial_state,
                                               const c10::optional<at::Tensor>& offsets,
                                               bool reverse, bool log_gates, bool exclusive);

std::tuple<at::Tensor, at::Tensor> matrix_affine_scan(const AffineBackend& be, const at::Tensor& A,
                                                      const at::Tensor& b, int64_t dim,
                                                      const c10::optional<at::Tensor>& initial_state,
                                                      const c10::optional<at::Tensor>& offsets,
                                                      bool reverse, bool exclusive);

// The dtype of states for inputs of dtype `t`: float32 for half types, `t` otherwise.
at::ScalarType state_dtype(at::ScalarType t);

}  // namespace parprims::host
