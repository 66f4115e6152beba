// The CUDA kernels of the scan family, instantiated one operator per translation unit
// (scan_add.cu, scan_mul.cu, scan_max.cu, scan_min.cu, scan_logaddexp.cu,
// scan_with_indices.cu, scan_bicyclic.cu, scan_extreme_grad.cu). They are split only so that the build compiles them
// in parallel: each instantiates the engine's kernels for every dtype of its operator, which
// takes minutes of nvcc time. scan_kernel.cpp holds the ops that call them.
#pragma once

#include "../host/scan_call.h"
#include "launch_context.h"

namespace parprims::cuda {

void scan_add(const host::ScanCall& c, const LaunchContext& ctx);
void scan_mul(const host::ScanCall& c, const LaunchContext& ctx);
void scan_max(const host::ScanCall& c, const LaunchContext& ctx);
void scan_min(const host::ScanCall& c, const LaunchContext& ctx);
void scan_logaddexp(const host::ScanCall& c, const LaunchContext& ctx);
void scan_with_indices(const host::ScanWithIndicesCall& c, const LaunchContext& ctx);
void scan_bicyclic(const host::BicyclicCall& c, const LaunchContext& ctx);
void scan_extreme_grad(const host::ExtremeScanGradCall& c, const LaunchContext& ctx);

}  // namespace parprims::cuda
