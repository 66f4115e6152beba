// The CUDA kernels of the affine recurrences, instantiated in three translation units
// (affine.cu: elementwise, every dtype; affine_backward.cu: its one-scan backward;
// affine_matrix.cu: state sizes 2, 4, 8). They are split
// only so that the build compiles them in parallel. affine_kernel.cpp holds the ops that call
// them.
#pragma once

#include "../host/affine_call.h"
#include "launch_context.h"

namespace parprims::cuda {

void affine(const host::AffineCall& c, const LaunchContext& ctx);
void affine_grad(const host::AffineGradCall& c, const LaunchContext& ctx);
void matrix_affine(const host::MatrixAffineCall& c, const LaunchContext& ctx);

}  // namespace parprims::cuda
