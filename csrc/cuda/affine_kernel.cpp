// The CUDA ops of the affine recurrences: affine_scan, matrix_affine_scan, their exclusive
// forms and affine_scan's one-scan backward. host/affine_registration.h checks and allocates
// (host/affine_host.h); each runner here calls its kernel unit (affine_instantiations.h: the
// dtype dispatch onto the CUDA engine, cuda/engine/engine.cuh) in a LaunchScope. Host code
// only. Schemas: csrc/registration.cpp.
#include <torch/library.h>

#include "../host/affine_registration.h"
#include "affine_instantiations.h"
#include "launch_scope.h"

namespace parprims::cuda {
namespace {

void run_affine(const host::PreparedAffine& c) {
  const LaunchScope scope(c.b);
  affine(c.call, scope.context());
}

void run_affine_grad(const host::PreparedAffineGrad& c) {
  const LaunchScope scope(c.h);
  affine_grad(c.call, scope.context());
}

void run_matrix_affine(const host::PreparedMatrixAffine& c) {
  const LaunchScope scope(c.b);
  matrix_affine(c.call, scope.context());
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) {
  host::AffineOps<&run_affine, &run_affine_grad, &run_matrix_affine>::register_kernels(m);
}

}  // namespace parprims::cuda
