// Host logic of selective_scan, shared by CPU and CUDA: argument checks, the plain params
// struct the kernels take, output allocation, and the final sums of the backward's partial
// gradients. A device's kernel file calls prepare_*, runs its kernel on the params, then
// finish_* (csrc/cpu/selective_scan_kernel.cpp, csrc/cuda/selective_scan_kernel.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

#include "../core/selective_scan.h"

namespace parprims::host {

using OptionalTensor = c10::optional<at::Tensor>;

// The inputs after their checks: small per-channel tensors in the compute dtype and
// contiguous; u, delta, z and variable B/C as given (any strides).
struct SelectiveScanInputs {
  at::Tensor u, delta, A, B, C, D, z, delta_bias, initial_state, offsets;  // undefined if absent
  bool delta_softplus = false;
  int64_t batch = 0, dim = 0, len = 0, dstate = 0, groups = 1;
  at::ScalarType compute = at::kFloat;  // float32, or float64 for float64 inputs
  int64_t num_states() const { return offsets.defined() ? offsets.numel() - 1 : batch; }
};

SelectiveScanInputs check_selective_scan(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                                         const at::Tensor& B, const at::Tensor& C, const OptionalTensor& D,
                                         const OptionalTensor& z, const OptionalTensor& delta_bias,
                                         bool delta_softplus, const OptionalTensor& initial_state,
                                         const OptionalTensor& cu_seqlens);

// The params of the inputs (outputs and checkpoints not set).
SelectiveScanParams input_params(const SelectiveScanInputs& in);

// The forward: outputs allocated, params pointing at them.
struct SelectiveScanForward {
  SelectiveScanInputs in;
  SelectiveScanParams params;
  at::Tensor out, last_state, checkpoints;
};

// `checkpoint_every`: the spacing of the states the forward saves for the backward (0: none).
SelectiveScanForward prepare_selective_scan_forward(SelectiveScanInputs in, int64_t checkpoint_every);

// The backward: gradients and partial sums allocated, params pointing at them. The per-task
// partial sums of A, D, delta_bias and constant B/C have a row per (time segment, batch row).
struct SelectiveScanBackward {
  SelectiveScanInputs in;
  SelectiveScanParams params;
  SelectiveScanGrads grads;
  at::Tensor du, ddelta, dz, dinitial;
  at::Tensor dA_partial, dD_partial, ddelta_bias_partial, dB_partial, dC_partial;
  at::Tensor dlast;  // compute dtype, contiguous, or undefined
  // The gradients when the device adds the partial sums (SelectiveScanGradTotals; undefined:
  // the partials are summed here).
  at::Tensor dA, dB, dC, dD, ddelta_bias;
};

// `partials_over_checkpoints`: the kernel writes the variable dB/dC partial sums over the
// checkpoints (SelectiveScanGrads::BC_partials_over_checkpoints), which the caller gives up.
SelectiveScanBackward prepare_selective_scan_backward(SelectiveScanInputs in, const at::Tensor& grad_out,
                                                      const OptionalTensor& grad_last_state,
                                                      const at::Tensor& checkpoints, int64_t checkpoint_every,
                                                      int64_t channel_block, int64_t time_segments = 1,
                                                      bool partials_over_checkpoints = false);

// (du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, dinitial_state); absent inputs get empty tensors.
using SelectiveScanGradients = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                                          at::Tensor, at::Tensor, at::Tensor>;
SelectiveScanGradients finish_selective_scan_backward(SelectiveScanBackward& bw);

}  // namespace parprims::host
