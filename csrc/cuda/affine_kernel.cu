// CUDA registrations of affine_scan, matrix_affine_scan and their exclusive forms (host code
// only: the kernels are instantiated in affine.cu and affine_matrix.cu).
#include <torch/library.h>

#include "../host/register.h"
#include "entry_points.h"

namespace parprims::cuda {
namespace {

const host::AffineBackend& backend() {
  static const host::AffineBackend be{&affine, &matrix_affine, /*always_validate_offsets=*/false};
  return be;
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) { host::AffineEntryPoints<&backend>::define(m); }

}  // namespace parprims::cuda
