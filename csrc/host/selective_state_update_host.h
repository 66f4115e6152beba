// Host logic of selective_state_update, shared by CPU and CUDA: the argument checks, the view of
// the form without heads as heads of one channel, the output, and the plain params struct the
// kernels take (csrc/cpu/selective_state_update_kernel.cpp,
// csrc/cuda/selective_state_update_kernel.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include "../core/selective_state_update.h"

namespace parprims::host {

struct SelectiveStateUpdate {
  SelectiveStateUpdateParams params;
  at::Tensor out;                 // x's shape and dtype, contiguous
  at::ScalarType input = at::kFloat;    // x, dt, z, out
  at::ScalarType bc = at::kFloat;       // B and C (x's dtype or float32)
  at::ScalarType compute = at::kFloat;  // state, A, D, dt_bias: float32, or float64 for float64 x
  at::Tensor A, B, C, D, dt_bias;  // what the params point at (converted copies kept alive)
};

// Checks the arguments (RuntimeError naming the argument) and returns the params of the update
// of `state` in place, out allocated.
SelectiveStateUpdate prepare_selective_state_update(const at::Tensor& state, const at::Tensor& x,
                                                    const at::Tensor& dt, const at::Tensor& A,
                                                    const at::Tensor& B, const at::Tensor& C,
                                                    const c10::optional<at::Tensor>& D,
                                                    const c10::optional<at::Tensor>& z,
                                                    const c10::optional<at::Tensor>& dt_bias, bool dt_softplus);

}  // namespace parprims::host
