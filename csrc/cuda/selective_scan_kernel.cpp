// The CUDA ops of selective_scan: the host side of the fused forward and backward
// (csrc/cuda/selective_scan/{forward,backward}.cuh hold the kernels, instantiated in
// selective_scan_forward.cu and selective_scan_backward.cu). Host code only.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "../host/selective_scan_host.h"
#include "launch_scope.h"
#include "selective_scan/launch.h"

namespace parprims::cuda {
namespace {

using host::OptionalTensor;

host::SelectiveScanInputs checked_inputs(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                                         const at::Tensor& B, const at::Tensor& C, const OptionalTensor& D,
                                         const OptionalTensor& z, const OptionalTensor& delta_bias,
                                         bool delta_softplus, const OptionalTensor& initial_state,
                                         const OptionalTensor& cu_seqlens) {
  return host::check_selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, cu_seqlens);
}

// Scratch accumulators across state tiles (only when N needs more than one tile).
void add_scratch(SelectiveScanShape& shape, const host::SelectiveScanInputs& in, int count, at::Tensor (&keep)[3]) {
  if (shape.state_tiles <= 1) return;
  void** slots[3] = {&shape.y_scratch, &shape.lB_scratch, &shape.daA_scratch};
  for (int k = 0; k < count; ++k) {
    keep[k] = at::empty({in.batch, in.dim, in.len}, in.u.options().dtype(in.compute));
    *slots[k] = keep[k].data_ptr();
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> selective_scan_forward(
    const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
    const OptionalTensor& D, const OptionalTensor& z, const OptionalTensor& delta_bias, bool delta_softplus,
    const OptionalTensor& initial_state, const OptionalTensor& cu_seqlens, bool save_checkpoints,
    bool /*private_checkpoints: autograd's business*/) {
  const LaunchScope scope(u);
  auto fw = host::prepare_selective_scan_forward(
      checked_inputs(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, cu_seqlens),
      save_checkpoints ? kSelectiveScanCheckpointEvery : 0);
  const auto& in = fw.in;
  if (in.dim == 0 || fw.last_state.numel() == 0) return {fw.out, fw.last_state, fw.checkpoints};
  if (in.len == 0) {  // no step: every last state is its initial state
    if (in.initial_state.defined()) fw.last_state.copy_(in.initial_state);
    else fw.last_state.zero_();
    return {fw.out, fw.last_state, fw.checkpoints};
  }
  auto shape = selective_scan_forward_shape(fw.params, u.scalar_type(), scope.context());
  at::Tensor scratch[3];
  add_scratch(shape, in, 1, scratch);
  launch_selective_scan_forward(fw.params, shape, u.scalar_type(), scope.context());
  return {fw.out, fw.last_state, fw.checkpoints};
}

// Whether the backward of `shape` can write the blocks' variable dB/dC partial sums over the
// checkpoints (SelectiveScanGrads::BC_partials_over_checkpoints): a block's chunk of sums
// (2 N x K) fits in its channels' slots of the chunk (channels x N).
bool partials_fit_over_checkpoints(const host::SelectiveScanInputs& in, const SelectiveScanShape& shape) {
  return (in.B.dim() > 2 || in.C.dim() > 2) && shape.state_tiles == 1 &&
         shape.channels_per_block >= 2 * kSelectiveScanCheckpointEvery &&
         (in.dim / in.groups) % shape.channels_per_block == 0;
}

// The gradients into which the pass after the backward adds its partial sums.
SelectiveScanGradTotals add_summed_gradients(host::SelectiveScanBackward& bw) {
  const auto& in = bw.in;
  SelectiveScanGradTotals g;
  const auto compute = in.u.options().dtype(in.compute);
  auto gradient = [](at::IntArrayRef shape, const at::TensorOptions& options, void*& to) {
    auto grad = at::empty(shape, options);
    to = grad.data_ptr();
    return grad;
  };
  auto state_input = [&](const at::Tensor& P, void*& to) {
    if (P.dim() > 2) return gradient({in.batch, in.groups, in.dstate, in.len}, in.u.options(), to);
    return gradient({in.dim, in.dstate}, compute, to);
  };
  bw.dA = gradient({in.dim, in.dstate}, compute, g.dA);
  bw.dB = state_input(in.B, g.dB);
  bw.dC = state_input(in.C, g.dC);
  if (in.D.defined()) bw.dD = gradient({in.dim}, compute, g.dD);
  if (in.delta_bias.defined()) bw.ddelta_bias = gradient({in.dim}, compute, g.ddelta_bias);
  return g;
}

// `consume_checkpoints`: the caller gives the checkpoints up, and the backward may overwrite them.
host::SelectiveScanGradients selective_scan_backward_impl(
    const at::Tensor& grad_out, const OptionalTensor& grad_last_state, const at::Tensor& u, const at::Tensor& delta,
    const at::Tensor& A, const at::Tensor& B, const at::Tensor& C, const OptionalTensor& D, const OptionalTensor& z,
    const OptionalTensor& delta_bias, bool delta_softplus, const OptionalTensor& initial_state,
    const OptionalTensor& cu_seqlens, const at::Tensor& checkpoints_in, bool consume_checkpoints) {
  const LaunchScope scope(u);
  auto in = checked_inputs(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, cu_seqlens);
  // A forward that was not asked for checkpoints (called directly, or without grad) runs again;
  // its checkpoints are this call's own.
  at::Tensor checkpoints = checkpoints_in;
  if (checkpoints.numel() == 0 && in.len > 0 && in.batch > 0 && in.dim > 0) {
    checkpoints = std::get<2>(selective_scan_forward(u, delta, A, B, C, D, z, delta_bias, delta_softplus,
                                                     initial_state, cu_seqlens, /*save_checkpoints=*/true,
                                                     /*private_checkpoints=*/true));
    consume_checkpoints = true;
  }
  const auto shape_params = host::input_params(in);
  auto shape = selective_scan_backward_shape(shape_params, u.scalar_type(), scope.context());
  const bool has_steps = in.len > 0 && in.batch > 0 && in.dim > 0;
  const bool over_checkpoints = has_steps && consume_checkpoints && partials_fit_over_checkpoints(in, shape);
  auto bw = host::prepare_selective_scan_backward(std::move(in), grad_out, grad_last_state,
                                                  has_steps ? checkpoints : at::Tensor(),
                                                  has_steps ? kSelectiveScanCheckpointEvery : 0,
                                                  shape.channels_per_block, shape.segments, over_checkpoints);
  if (!has_steps) {
    for (auto* t : {&bw.dA_partial, &bw.dD_partial, &bw.ddelta_bias_partial, &bw.dB_partial, &bw.dC_partial}) {
      if (t->defined()) t->zero_();
    }
    return host::finish_selective_scan_backward(bw);
  }
  const auto totals = add_summed_gradients(bw);
  at::Tensor scratch[3];
  add_scratch(shape, bw.in, 3, scratch);
  launch_selective_scan_backward(bw.params, bw.grads, totals, shape, u.scalar_type(), scope.context());
  return host::finish_selective_scan_backward(bw);
}

// _selective_scan_backward (kConsume false) and _selective_scan_backward_consuming.
template <bool kConsume>
host::SelectiveScanGradients selective_scan_backward(
    const at::Tensor& grad_out, const OptionalTensor& grad_last_state, const at::Tensor& u, const at::Tensor& delta,
    const at::Tensor& A, const at::Tensor& B, const at::Tensor& C, const OptionalTensor& D, const OptionalTensor& z,
    const OptionalTensor& delta_bias, bool delta_softplus, const OptionalTensor& initial_state,
    const OptionalTensor& cu_seqlens, const at::Tensor& checkpoints) {
  return selective_scan_backward_impl(grad_out, grad_last_state, u, delta, A, B, C, D, z, delta_bias, delta_softplus,
                                      initial_state, cu_seqlens, checkpoints, kConsume);
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CUDA, m) {
  m.impl("_selective_scan_forward", &selective_scan_forward);
  m.impl("_selective_scan_backward", &selective_scan_backward<false>);
  m.impl("_selective_scan_backward_consuming", &selective_scan_backward<true>);
}

}  // namespace parprims::cuda
