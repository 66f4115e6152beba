#include "selective_state_update_host.h"

#include <ATen/ops/empty.h>
#include <ATen/MemoryOverlap.h>

#include <algorithm>
#include <string>
#include <vector>

namespace parprims::host {

namespace {

std::string dtype_str(at::ScalarType t) { return "torch." + std::string(c10::getDtypeNames(t).first); }

bool is_floating_input(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble;
}

void check_device(const at::Tensor& t, const at::Tensor& state, const char* name) {
  TORCH_CHECK(t.device() == state.device(), name, ": expected a tensor on ", state.device(),
              " (state's device), got ", t.device());
}

void check_shape(const at::Tensor& t, at::IntArrayRef shape, const char* name, const char* shape_text) {
  TORCH_CHECK(t.sizes() == shape, name, ": expected shape ", shape_text, " = ", shape, ", got ", t.sizes());
}

// A, D or dt_bias: float32, or float64 with float64 inputs; returned in the compute dtype (a
// copy only for float32 with float64 inputs), strides kept.
at::Tensor compute_typed(const at::Tensor& t, at::ScalarType compute, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == compute, name, ": expected torch.float32",
              compute == at::kDouble ? " or torch.float64" : "", ", got ", dtype_str(t.scalar_type()));
  return t.scalar_type() == compute ? t : t.to(compute);
}

Strided3 strided(const at::Tensor& t) {
  Strided3 s;
  if (!t.defined()) return s;
  s.data = t.data_ptr();
  s.stride0 = t.stride(0);
  s.stride1 = t.dim() > 1 ? t.stride(1) : 0;
  s.stride2 = t.dim() > 2 ? t.stride(2) : 0;
  return s;
}

HeadRowTensor head_rows(const at::Tensor& t) {  // (batch, H, P)
  HeadRowTensor r;
  if (!t.defined()) return r;
  r.data = t.data_ptr();
  r.batch_stride = t.stride(0);
  r.head_stride = t.stride(1);
  r.dim_stride = t.stride(2);
  return r;
}

}  // namespace

SelectiveStateUpdate prepare_selective_state_update(const at::Tensor& state, const at::Tensor& x,
                                                    const at::Tensor& dt, const at::Tensor& A,
                                                    const at::Tensor& B, const at::Tensor& C,
                                                    const c10::optional<at::Tensor>& D,
                                                    const c10::optional<at::Tensor>& z,
                                                    const c10::optional<at::Tensor>& dt_bias, bool dt_softplus) {
  SelectiveStateUpdate su;
  TORCH_CHECK(state.dim() == 3 || state.dim() == 4, "state: expected shape (batch, dim, N) or (batch, H, P, N), got ",
              state.dim(), " dimensions of shape ", state.sizes());
  const bool heads = state.dim() == 4;
  const int64_t batch = state.size(0);
  const int64_t N = state.size(-1);
  TORCH_CHECK(N >= 1, "state: expected N = state.size(-1) >= 1, got shape ", state.sizes());
  const auto rows_shape = state.sizes().slice(0, state.dim() - 1);  // (batch, dim) or (batch, H, P)
  const auto chan_shape = state.sizes().slice(1, state.dim() - 2);  // (dim,) or (H, P)
  const char* rows_text = heads ? "(batch, H, P)" : "(batch, dim)";
  const char* chan_text = heads ? "(H, P)" : "(dim,)";
  const int64_t nheads = state.size(1);  // H, or dim without heads (heads of one channel)

  // x, dt, z
  check_device(x, state, "x");
  TORCH_CHECK(is_floating_input(x.scalar_type()),
              "x: expected torch.float32, torch.float16, torch.bfloat16 or torch.float64, got ",
              dtype_str(x.scalar_type()));
  check_shape(x, rows_shape, "x", rows_text);
  su.input = x.scalar_type();
  su.compute = su.input == at::kDouble ? at::kDouble : at::kFloat;
  TORCH_CHECK(state.scalar_type() == su.compute, "state: expected ", dtype_str(su.compute), " (the state of ",
              dtype_str(su.input), " inputs), got ", dtype_str(state.scalar_type()));
  TORCH_CHECK(at::has_internal_overlap(state) != at::MemOverlap::Yes,
              "state: updated in place, so its elements must not overlap in memory (an expanded tensor?), got "
              "strides ", state.strides());
  auto like_x = [&](const at::Tensor& t, const char* name) {
    check_device(t, state, name);
    check_shape(t, rows_shape, name, rows_text);
    TORCH_CHECK(t.scalar_type() == su.input, name, ": expected x's dtype ", dtype_str(su.input), ", got ",
                dtype_str(t.scalar_type()));
  };
  like_x(dt, "dt");
  if (z.has_value()) like_x(*z, "z");

  // A, D, dt_bias
  check_device(A, state, "A");
  {
    std::vector<int64_t> a_shape(chan_shape.begin(), chan_shape.end());
    a_shape.push_back(N);
    check_shape(A, a_shape, "A", heads ? "(H, P, N)" : "(dim, N)");
  }
  su.A = compute_typed(A, su.compute, "A");
  auto per_channel = [&](const c10::optional<at::Tensor>& t, const char* name) -> at::Tensor {
    if (!t.has_value()) return at::Tensor();
    check_device(*t, state, name);
    check_shape(*t, chan_shape, name, chan_text);
    return compute_typed(*t, su.compute, name);
  };
  su.D = per_channel(D, "D");
  su.dt_bias = per_channel(dt_bias, "dt_bias");

  // B, C: (batch, N) (no heads only) or (batch, G, N)
  int64_t groups = -1;
  auto state_input = [&](const at::Tensor& t, const char* name) {
    check_device(t, state, name);
    const bool ok_dims = t.dim() == 3 || (!heads && t.dim() == 2);
    TORCH_CHECK(ok_dims, name, heads ? ": expected shape (batch, G, N), got " : ": expected shape (batch, N) or "
                "(batch, G, N), got ", t.dim(), " dimensions of shape ", t.sizes());
    const int64_t g = t.dim() == 3 ? t.size(1) : 1;
    const bool ok = t.size(0) == batch && t.size(-1) == N;
    TORCH_CHECK(ok, name, ": expected shape (batch, ", t.dim() == 3 ? "G, " : "", "N) with batch = ", batch,
                " and N = ", N, ", got ", t.sizes());
    TORCH_CHECK(g >= 1 && nheads % g == 0, name, ": expected a number of groups G that divides ",
                heads ? "H = " : "dim = ", nheads, ", got G = ", g);
    if (groups >= 0) {
      TORCH_CHECK(g == groups, "B, C: expected the same number of groups, got ", groups, " and ", g);
    }
    groups = g;
    TORCH_CHECK(t.scalar_type() == su.input || t.scalar_type() == at::kFloat, name, ": expected ",
                su.input == at::kFloat ? "torch.float32 (x's dtype)" : "x's dtype " + dtype_str(su.input) +
                " or torch.float32", ", got ", dtype_str(t.scalar_type()));
    return t.dim() == 2 ? t.unsqueeze(1) : t;
  };
  at::Tensor B3 = state_input(B, "B");
  at::Tensor C3 = state_input(C, "C");
  // The kernels read B and C in one type: float64 with float64 x (float32 B or C converted),
  // else x's dtype or float32 (when only one of them is float32, the other is converted).
  const at::ScalarType bc = su.compute == at::kDouble                   ? at::kDouble
                            : B3.scalar_type() == C3.scalar_type() ? B3.scalar_type()
                                                                   : at::kFloat;
  if (B3.scalar_type() != bc) B3 = B3.to(bc);
  if (C3.scalar_type() != bc) C3 = C3.to(bc);
  su.bc = B3.scalar_type();  // x's dtype, or float32 with half inputs

  su.out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));

  // The heads view: without heads, H = dim heads of P = 1 channel.
  auto as_heads = [&](const at::Tensor& t, int64_t at_dim) {
    return (!t.defined() || heads) ? t : t.unsqueeze(at_dim);
  };
  const at::Tensor state4 = as_heads(state, 2);
  auto& p = su.params;
  p.batch = batch;
  p.heads = nheads;
  p.dim = state4.size(2);
  p.dstate = N;
  p.heads_per_group = std::max<int64_t>(1, nheads / groups);
  p.state = state4.data_ptr();
  p.state_batch_stride = state4.stride(0);
  p.state_head_stride = state4.stride(1);
  p.state_dim_stride = state4.stride(2);
  p.state_dstate_stride = state4.stride(3);
  p.x = head_rows(as_heads(x, 2));
  p.dt = head_rows(as_heads(dt, 2));
  if (z.has_value()) p.z = head_rows(as_heads(*z, 2));
  p.out = head_rows(as_heads(su.out, 2));
  su.A = as_heads(su.A, 1);
  su.D = as_heads(su.D, 1);
  su.dt_bias = as_heads(su.dt_bias, 1);
  p.A = strided(su.A);
  p.D = strided(su.D);
  p.dt_bias = strided(su.dt_bias);
  p.B = strided(B3);
  p.C = strided(C3);
  p.dt_softplus = dt_softplus;
  // B3/C3 may be float32 copies: keep them alive with the result.
  su.B = B3;
  su.C = C3;
  return su;
}

}  // namespace parprims::host
