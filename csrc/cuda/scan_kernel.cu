// CUDA registrations of scan, segmented_scan and their helpers (host code only: the kernels
// are instantiated in scan_<op>.cu).
#include <torch/library.h>

#include "../host/register.h"
#include "entry_points.h"

namespace parprims::cuda {
namespace {

const host::ScanBackend& backend() {
  static const host::ScanBackend be{&scan_add, &scan_mul, &scan_max, &scan_min, &scan_logaddexp,
                                    &scan_arg, &scan_bicyclic, /*always_validate_offsets=*/false};
  return be;
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) { host::ScanEntryPoints<&backend>::define(m); }

}  // namespace parprims::cuda
