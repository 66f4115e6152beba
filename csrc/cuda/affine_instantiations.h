// The CUDA kernels of the affine recurrences, instantiated in three translation units
// (affine.cu: elementwise, every dtype; affine_backward.cu: its one-scan backward;
// affine_matrix.cu: state sizes 2, 4, 8). They are split
// only so that the build compiles them in parallel. affine_kernel.cu holds the ops that call
// them.
#pragma once

#include "../host/affine_host.h"

namespace parprims::cuda {

void affine(const host::PreparedAffine& c);
void affine_grad(const host::PreparedAffineGrad& c);
void matrix_affine(const host::PreparedMatrixAffine& c);

}  // namespace parprims::cuda
