#include "selective_scan_host.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <string>

#include "common.h"

namespace parprims::host {

namespace {

bool is_floating_input(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble;
}

void check_device(const at::Tensor& t, const at::Tensor& u, const char* name) {
  TORCH_CHECK(t.device() == u.device(), name, ": expected a tensor on ", u.device(), " (u's device), got ",
              t.device());
}

// A (batch, dim, L) input with u's shape and dtype.
void check_like_u(const at::Tensor& t, const at::Tensor& u, const char* name) {
  check_device(t, u, name);
  TORCH_CHECK(t.sizes() == u.sizes(), name, ": expected u's shape ", u.sizes(), " (batch, dim, L), got ",
              t.sizes());
  TORCH_CHECK(t.scalar_type() == u.scalar_type(), name, ": expected u's dtype ", dtype_name(u.scalar_type()),
              ", got ", dtype_name(t.scalar_type()));
}

// A small floating tensor of a fixed shape, returned contiguous in the compute dtype.
at::Tensor per_channel(const at::Tensor& t, const at::Tensor& u, at::IntArrayRef shape, at::ScalarType compute,
                       const char* name, const char* shape_text) {
  check_device(t, u, name);
  TORCH_CHECK(t.sizes() == shape, name, ": expected shape ", shape, " ", shape_text, ", got ", t.sizes());
  TORCH_CHECK(is_floating_input(t.scalar_type()), name, ": expected a floating tensor, got ",
              dtype_name(t.scalar_type()));
  return t.to(compute).contiguous();
}

// B or C: constant (dim, N), variable (batch, N, L) or grouped (batch, G, N, L).
at::Tensor check_state_input(const at::Tensor& t, const SelectiveScanInputs& in, int64_t& groups, const char* name) {
  check_device(t, in.u, name);
  if (t.dim() == 2) {
    return per_channel(t, in.u, {in.dim, in.dstate}, in.compute, name, "(dim, N)");
  }
  TORCH_CHECK(t.dim() == 3 || t.dim() == 4, name, ": expected (dim, N), (batch, N, L) or (batch, G, N, L), got ",
              t.dim(), " dimensions of shape ", t.sizes());
  TORCH_CHECK(t.scalar_type() == in.u.scalar_type(), name, ": a variable ", name, " has u's dtype ",
              dtype_name(in.u.scalar_type()), ", got ", dtype_name(t.scalar_type()));
  const int64_t g = t.dim() == 4 ? t.size(1) : 1;
  const bool ok = t.size(0) == in.batch && t.size(-2) == in.dstate && t.size(-1) == in.len;
  TORCH_CHECK(ok, name, ": expected shape (batch, ", t.dim() == 4 ? "G, " : "", "N, L) = (", in.batch, ", ",
              t.dim() == 4 ? "G, " : "", in.dstate, ", ", in.len, "), got ", t.sizes());
  TORCH_CHECK(g >= 1 && in.dim % g == 0, name, ": expected a number of groups G that divides dim = ", in.dim,
              ", got G = ", g);
  if (t.dim() == 4 && groups != 1) {
    TORCH_CHECK(g == groups, "B, C: expected the same number of groups, got ", groups, " and ", g);
  }
  if (t.dim() == 4) groups = g;
  return t.dim() == 3 ? t.unsqueeze(1) : t;
}

}  // namespace

SelectiveScanInputs check_selective_scan(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                                         const at::Tensor& B, const at::Tensor& C, const OptionalTensor& D,
                                         const OptionalTensor& z, const OptionalTensor& delta_bias,
                                         bool delta_softplus, const OptionalTensor& initial_state,
                                         const OptionalTensor& cu_seqlens) {
  SelectiveScanInputs in;
  TORCH_CHECK(u.dim() == 3, "u: expected shape (batch, dim, L), got ", u.sizes());
  TORCH_CHECK(is_floating_input(u.scalar_type()),
              "u: expected torch.float32, torch.float16, torch.bfloat16 or torch.float64, got ",
              dtype_name(u.scalar_type()));
  in.u = u;
  in.batch = u.size(0);
  in.dim = u.size(1);
  in.len = u.size(2);
  in.compute = u.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  check_like_u(delta, u, "delta");
  in.delta = delta;
  check_device(A, u, "A");
  TORCH_CHECK(A.dim() == 2 && A.size(0) == in.dim && A.size(1) >= 1,
              "A: expected shape (dim, N) with dim = ", in.dim, " and N >= 1, got ", A.sizes());
  TORCH_CHECK(A.scalar_type() == at::kFloat || A.scalar_type() == in.compute, "A: expected torch.float32",
              in.compute == at::kDouble ? " or torch.float64" : "", ", got ", dtype_name(A.scalar_type()));
  in.dstate = A.size(1);
  in.A = A.to(in.compute).contiguous();
  in.B = check_state_input(B, in, in.groups, "B");
  in.C = check_state_input(C, in, in.groups, "C");
  if (D.has_value()) in.D = per_channel(*D, u, {in.dim}, in.compute, "D", "(dim,)");
  if (z.has_value()) {
    check_like_u(*z, u, "z");
    in.z = *z;
  }
  if (delta_bias.has_value()) in.delta_bias = per_channel(*delta_bias, u, {in.dim}, in.compute, "delta_bias", "(dim,)");
  in.delta_softplus = delta_softplus;
  if (cu_seqlens.has_value()) {
    TORCH_CHECK(in.batch == 1, "cu_seqlens: packed sequences lie along L of a batch of 1, got batch = ", in.batch);
    in.offsets = checked_offsets(cu_seqlens, u, in.len, "cu_seqlens");
  }
  if (initial_state.has_value()) {
    const char* text = cu_seqlens.has_value() ? "(number of sequences, dim, N)" : "(batch, dim, N)";
    in.initial_state = per_channel(*initial_state, u, {in.num_states(), in.dim, in.dstate}, in.compute,
                                   "initial_state", text);
  }
  return in;
}

namespace {

SeqTensor seq_tensor(const at::Tensor& t) {
  SeqTensor s;
  if (!t.defined()) return s;
  s.data = t.data_ptr();
  s.batch_stride = t.stride(0);
  s.dim_stride = t.stride(1);
  s.len_stride = t.stride(2);
  return s;
}

StateInput state_input(const at::Tensor& t) {
  StateInput s;
  s.data = t.data_ptr();
  if (t.dim() == 2) {  // (dim, N)
    s.dim_stride = t.stride(0);
    s.state_stride = t.stride(1);
  } else {  // (batch, G, N, L)
    s.variable = true;
    s.batch_stride = t.stride(0);
    s.group_stride = t.stride(1);
    s.state_stride = t.stride(2);
    s.len_stride = t.stride(3);
  }
  return s;
}

const void* ptr_or_null(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

}  // namespace

SelectiveScanParams input_params(const SelectiveScanInputs& in) {
  SelectiveScanParams p;
  p.batch = in.batch;
  p.dim = in.dim;
  p.len = in.len;
  p.dstate = in.dstate;
  p.groups = in.groups;
  p.dim_per_group = in.dim / in.groups;
  p.u = seq_tensor(in.u);
  p.delta = seq_tensor(in.delta);
  p.z = seq_tensor(in.z);
  p.B = state_input(in.B);
  p.C = state_input(in.C);
  p.A = in.A.data_ptr();
  p.D = ptr_or_null(in.D);
  p.delta_bias = ptr_or_null(in.delta_bias);
  p.delta_softplus = in.delta_softplus;
  p.initial_state = ptr_or_null(in.initial_state);
  if (in.offsets.defined()) {
    p.offsets = in.offsets.data_ptr();
    p.offsets_int64 = in.offsets.scalar_type() == at::kLong;
    p.num_seqs = in.offsets.numel() - 1;
    p.offsets_stride = in.offsets.stride(0);
  }
  return p;
}

SelectiveScanForward prepare_selective_scan_forward(SelectiveScanInputs in, int64_t checkpoint_every) {
  SelectiveScanForward fw;
  fw.out = at::empty({in.batch, in.dim, in.len}, in.u.options());
  fw.last_state = at::empty({in.num_states(), in.dim, in.dstate}, in.u.options().dtype(in.compute));
  const int64_t chunks = checkpoint_every > 0 ? (in.len + checkpoint_every - 1) / checkpoint_every : 0;
  fw.checkpoints = at::empty({checkpoint_every > 0 ? in.batch : 0, in.dim, chunks, in.dstate},
                             in.u.options().dtype(in.compute));
  fw.params = input_params(in);
  fw.params.out = seq_tensor(fw.out);
  fw.params.last_state = fw.last_state.data_ptr();
  if (checkpoint_every > 0) {
    fw.params.checkpoints = fw.checkpoints.data_ptr();
    fw.params.checkpoint_chunks = chunks;
  }
  fw.in = std::move(in);
  return fw;
}

SelectiveScanBackward prepare_selective_scan_backward(SelectiveScanInputs in, const at::Tensor& grad_out,
                                                      const OptionalTensor& grad_last_state,
                                                      const at::Tensor& checkpoints, int64_t checkpoint_every,
                                                      int64_t channel_block, int64_t time_segments,
                                                      bool partials_over_checkpoints) {
  check_like_u(grad_out, in.u, "grad_out");
  SelectiveScanBackward bw;
  const auto opts = in.u.options();
  const auto acc = opts.dtype(in.compute);
  bw.params = input_params(in);
  if (checkpoint_every > 0) {
    const int64_t chunks = (in.len + checkpoint_every - 1) / checkpoint_every;
    TORCH_CHECK(checkpoints.sizes() == at::IntArrayRef({in.batch, in.dim, chunks, in.dstate}) &&
                    checkpoints.scalar_type() == in.compute && checkpoints.is_contiguous(),
                "checkpoints: expected the states saved by the forward, of shape (", in.batch, ", ", in.dim, ", ",
                chunks, ", ", in.dstate, "), got ", checkpoints.sizes());
    bw.params.checkpoints = checkpoints.data_ptr();
    bw.params.checkpoint_chunks = chunks;
  }
  auto& g = bw.grads;
  g.dout = seq_tensor(grad_out);
  if (grad_last_state.has_value()) {
    bw.dlast = per_channel(*grad_last_state, in.u, {in.num_states(), in.dim, in.dstate}, in.compute,
                           "grad_last_state", "(the shape of last_state)");
    g.dlast_state = bw.dlast.data_ptr();
  }
  bw.du = at::empty({in.batch, in.dim, in.len}, opts);
  bw.ddelta = at::empty({in.batch, in.dim, in.len}, opts);
  g.du = bw.du.data_ptr();
  g.ddelta = bw.ddelta.data_ptr();
  if (in.z.defined()) {
    bw.dz = at::empty({in.batch, in.dim, in.len}, opts);
    g.dz = bw.dz.data_ptr();
  }
  if (in.initial_state.defined()) {
    bw.dinitial = at::empty({in.num_states(), in.dim, in.dstate}, acc);
    g.dinitial = bw.dinitial.data_ptr();
  }
  const int64_t partial_rows = time_segments * in.batch;
  bw.dA_partial = at::empty({partial_rows, in.dim, in.dstate}, acc);
  g.dA_partial = bw.dA_partial.data_ptr();
  if (in.D.defined()) {
    bw.dD_partial = at::empty({partial_rows, in.dim}, acc);
    g.dD_partial = bw.dD_partial.data_ptr();
  }
  if (in.delta_bias.defined()) {
    bw.ddelta_bias_partial = at::empty({partial_rows, in.dim}, acc);
    g.ddelta_bias_partial = bw.ddelta_bias_partial.data_ptr();
  }
  g.channel_block = channel_block;
  const int64_t blocks = (in.dim / in.groups + channel_block - 1) / channel_block;
  if (partials_over_checkpoints) {
    TORCH_INTERNAL_ASSERT(checkpoint_every == kSelectiveScanCheckpointEvery && channel_block >= 2 * checkpoint_every &&
                          (in.dim / in.groups) % channel_block == 0 && (in.B.dim() > 2 || in.C.dim() > 2));
    g.BC_partials_over_checkpoints = true;
  }
  auto partial_for = [&](const at::Tensor& P) {
    if (P.dim() == 2) return at::empty({partial_rows, in.dim, in.dstate}, acc);
    return partials_over_checkpoints ? at::Tensor() : at::empty({blocks, in.batch, in.groups, in.dstate, in.len}, acc);
  };
  bw.dB_partial = partial_for(in.B);
  bw.dC_partial = partial_for(in.C);
  g.dB_partial = bw.dB_partial.defined() ? bw.dB_partial.data_ptr() : nullptr;
  g.dC_partial = bw.dC_partial.defined() ? bw.dC_partial.data_ptr() : nullptr;
  bw.in = std::move(in);
  return bw;
}

SelectiveScanGradients finish_selective_scan_backward(SelectiveScanBackward& bw) {
  const auto& in = bw.in;
  // Each absent gradient is its own empty tensor: outputs of an op never alias each other.
  auto none = [&] { return at::empty({0}, in.u.options().dtype(in.compute)); };
  // Partial sums are added in a fixed order (here, or on the CUDA device): the gradients are the
  // same on every run.
  TORCH_INTERNAL_ASSERT(!bw.grads.BC_partials_over_checkpoints || bw.dA.defined());
  auto sum = [](const at::Tensor& total, const at::Tensor& partial) {
    return total.defined() ? total : partial.sum(0);
  };
  at::Tensor dinitial = none();
  if (in.initial_state.defined()) {
    dinitial = bw.dinitial;
    if (in.len == 0) {
      dinitial = bw.dlast.defined() ? bw.dlast.clone() : at::zeros_like(dinitial);
    } else if (in.offsets.defined()) {
      // An empty sequence passes its last state's gradient straight to its initial state.
      const auto empty = (in.offsets.slice(0, 1) == in.offsets.slice(0, 0, -1)).view({-1, 1, 1});
      const auto through = bw.dlast.defined() ? bw.dlast : at::zeros_like(dinitial);
      dinitial = at::where(empty, through, dinitial);
    }
  }
  return {bw.du,
          bw.ddelta,
          sum(bw.dA, bw.dA_partial),
          sum(bw.dB, bw.dB_partial).to(in.B.scalar_type()),  // constant: (dim, N); variable: (batch, G, N, L)
          sum(bw.dC, bw.dC_partial).to(in.C.scalar_type()),
          in.D.defined() ? sum(bw.dD, bw.dD_partial) : none(),
          in.z.defined() ? bw.dz : none(),
          in.delta_bias.defined() ? sum(bw.ddelta_bias, bw.ddelta_bias_partial) : none(),
          dinitial};
}

}  // namespace parprims::host

// The public op: the forward that saves checkpoints when autograd will need them.
namespace {

std::tuple<at::Tensor, at::Tensor> selective_scan_composite(
    const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
    const c10::optional<at::Tensor>& D, const c10::optional<at::Tensor>& z,
    const c10::optional<at::Tensor>& delta_bias, bool delta_softplus,
    const c10::optional<at::Tensor>& initial_state, const c10::optional<at::Tensor>& cu_seqlens) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("parprims::_selective_scan_forward", "")
                             .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
                                 const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                 const at::Tensor&, const c10::optional<at::Tensor>&,
                                 const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&, bool,
                                 const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&, bool, bool)>();
  auto needs = [](const c10::optional<at::Tensor>& t) { return t.has_value() && t->requires_grad(); };
  const bool save = at::GradMode::is_enabled() &&
                    (u.requires_grad() || delta.requires_grad() || A.requires_grad() || B.requires_grad() ||
                     C.requires_grad() || needs(D) || needs(z) || needs(delta_bias) || needs(initial_state));
  auto [out, last_state, checkpoints] =
      op.call(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, cu_seqlens, save,
              /*private_checkpoints=*/true);
  return {out, last_state};
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CompositeImplicitAutograd, m) {
  m.impl("selective_scan", &selective_scan_composite);
}
