// The CUDA instantiations, one translation unit per operator family so that they compile in
// parallel; csrc/cuda/*_kernel.cu register them with the dispatcher.
#pragma once

#include <ATen/ATen.h>

#include "../core/scan_geometry.h"
#include "../host/affine_ops.h"

namespace parprims::cuda {

void scan_add(const at::Tensor& in, const at::Tensor& out, int64_t dim, const ScanGeometry& g);
void scan_mul(const at::Tensor& in, const at::Tensor& out, int64_t dim, const ScanGeometry& g);
void scan_max(const at::Tensor& in, const at::Tensor& out, int64_t dim, const ScanGeometry& g);
void scan_min(const at::Tensor& in, const at::Tensor& out, int64_t dim, const ScanGeometry& g);
void scan_logaddexp(const at::Tensor& in, const at::Tensor& out, int64_t dim, const ScanGeometry& g);
void scan_arg(bool is_max, const at::Tensor& in, const at::Tensor& out, const at::Tensor& index,
              int64_t dim, const ScanGeometry& g);
void scan_bicyclic(const at::Tensor& p_in, const at::Tensor& q_in, const at::Tensor& p_out,
                   const at::Tensor& q_out, int64_t dim, const ScanGeometry& g);
void affine(const host::AffineArgs& args, const ScanGeometry& g);
void matrix_affine(const host::MatrixAffineArgs& args, const ScanGeometry& g);

}  // namespace parprims::cuda
