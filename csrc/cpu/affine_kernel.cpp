// The CPU ops of the affine recurrences: affine_scan, matrix_affine_scan, their exclusive
// forms and affine_scan's one-scan backward. host/affine_registration.h checks and allocates
// (host/affine_host.h); each runner here dispatches on the dtype (host/affine_dispatch.h) onto
// the CPU engine (cpu/engine.h). Schemas: csrc/registration.cpp.
#include <torch/library.h>

#include "../host/affine_dispatch.h"
#include "../host/affine_registration.h"
#include "engine_cpu.h"

namespace parprims::cpu {
namespace {

void run_affine(const host::PreparedAffine& c) { host::dispatch_affine(c.call, Engine{}); }

void run_affine_grad(const host::PreparedAffineGrad& c) { host::dispatch_affine_grad(c.call, Engine{}); }

void run_matrix_affine(const host::PreparedMatrixAffine& c) { host::dispatch_matrix_affine(c.call, Engine{}); }

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) {
  host::AffineOps<&run_affine, &run_affine_grad, &run_matrix_affine>::register_kernels(m);
}

}  // namespace parprims::cpu
