// The CUDA op selective_state_update: checks and prepares through
// host/selective_state_update_host.h, then launches the kernel (selective_state_update.cu).
// Host code only. Schemas: csrc/registration.cpp.
#include <torch/library.h>

#include "../host/selective_state_update_host.h"
#include "launch_scope.h"
#include "selective_state_update.h"

namespace parprims::cuda {
namespace {

at::Tensor selective_state_update(const at::Tensor& state, const at::Tensor& x, const at::Tensor& dt,
                                  const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
                                  const c10::optional<at::Tensor>& D, const c10::optional<at::Tensor>& z,
                                  const c10::optional<at::Tensor>& dt_bias, bool dt_softplus) {
  const LaunchScope scope(state);
  const auto su = host::prepare_selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus);
  if (su.params.rows() == 0) return su.out;
  launch_selective_state_update(su.params, su.input, su.bc, scope.context());
  return su.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) { m.impl("selective_state_update", &selective_state_update); }

}  // namespace parprims::cuda
