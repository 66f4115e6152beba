// The CUDA kernels of the scan family, instantiated one operator per translation unit
// (scan_add.cu, scan_mul.cu, scan_max.cu, scan_min.cu, scan_logaddexp.cu,
// scan_with_indices.cu, scan_bicyclic.cu). They are split only so that the build compiles them
// in parallel: each instantiates the engine's kernels for every dtype of its operator, which
// takes minutes of nvcc time. scan_kernel.cu holds the ops that call them.
#pragma once

#include "../host/scan_host.h"

namespace parprims::cuda {

void scan_add(const host::PreparedScan& c);
void scan_mul(const host::PreparedScan& c);
void scan_max(const host::PreparedScan& c);
void scan_min(const host::PreparedScan& c);
void scan_logaddexp(const host::PreparedScan& c);
void scan_with_indices(const host::PreparedScanWithIndices& c);
void scan_bicyclic(const host::PreparedBicyclic& c);

}  // namespace parprims::cuda
