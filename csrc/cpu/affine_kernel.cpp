// CPU kernels of affine_scan, matrix_affine_scan and their exclusive forms.
#include <torch/library.h>

#include "../host/affine_dispatch.h"
#include "../host/register.h"
#include "engine_cpu.h"

namespace parprims::cpu {
namespace {

const host::AffineBackend& backend() {
  static const host::AffineBackend be{
      [](const host::AffineArgs& args, const ScanGeometry& g) { host::dispatch_affine(args, g, Engine{}); },
      [](const host::MatrixAffineArgs& args, const ScanGeometry& g) {
        host::dispatch_matrix_affine(args, g, Engine{});
      },
      /*always_validate_offsets=*/true};
  return be;
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) { host::AffineEntryPoints<&backend>::define(m); }

}  // namespace parprims::cpu
