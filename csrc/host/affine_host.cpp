#include "affine_host.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include <ATen/ExpandUtils.h>

namespace parprims::host {

at::ScalarType state_dtype(at::ScalarType t) {
  return (t == at::kHalf || t == at::kBFloat16) ? at::kFloat : t;
}

namespace {

// The shape of one state: `b`'s shape without `dim` (and, for matrices, with the state dim).
std::vector<int64_t> state_shape(const at::Tensor& b, int64_t dim, int64_t segments, bool packed) {
  std::vector<int64_t> shape;
  if (packed) shape.push_back(segments);
  for (int64_t d = 0; d < b.dim(); ++d) {
    if (d != dim) shape.push_back(b.size(d));
  }
  return shape;
}

// Checks `initial_state` against the expected state shape and returns it contiguous, in the
// state dtype (it may also come in the input dtype), or an undefined tensor.
at::Tensor prepare_initial(const c10::optional<at::Tensor>& initial, const at::Tensor& b,
                           const std::vector<int64_t>& shape, at::ScalarType sdtype) {
  if (!initial.has_value()) return at::Tensor();
  const auto& h0 = *initial;
  TORCH_CHECK(h0.device() == b.device(), "initial_state: expected a tensor on ", b.device(),
              ", got ", h0.device());
  TORCH_CHECK(h0.sizes() == at::IntArrayRef(shape), "initial_state: expected shape ",
              at::IntArrayRef(shape), " (b's shape without dim, with a leading number of "
              "sequences when offsets are given), got ", h0.sizes());
  if (sdtype == b.scalar_type()) {
    TORCH_CHECK(h0.scalar_type() == sdtype, "initial_state: expected dtype ", dtype_name(sdtype),
                " (b's), got ", dtype_name(h0.scalar_type()));
  } else {
    TORCH_CHECK(h0.scalar_type() == sdtype || h0.scalar_type() == b.scalar_type(),
                "initial_state: expected dtype ", dtype_name(sdtype), " or ", dtype_name(b.scalar_type()),
                " (b's), got ", dtype_name(h0.scalar_type()));
  }
  return h0.to(sdtype).contiguous();
}

int64_t segment_count(const c10::optional<at::Tensor>& offsets) {
  return offsets.has_value() ? offsets->numel() - 1 : 1;
}

// The final states. The engines write the one of every non-empty sequence; empty sequences
// (possible only with offsets, or when the scanned dimension has length 0) keep the initial
// state (zeros without one), so only then is the tensor filled first.
at::Tensor allocate_final(const at::Tensor& initial, const std::vector<int64_t>& shape,
                          const at::TensorOptions& options, bool may_have_empty_sequences) {
  if (!may_have_empty_sequences) return at::empty(shape, options);
  return initial.defined() ? initial.clone() : at::zeros(shape, options);
}

}  // namespace

PreparedAffine prepare_affine_scan(const at::Tensor& a, const at::Tensor& b, int64_t dim_in,
                                   const c10::optional<at::Tensor>& initial_state,
                                   const c10::optional<at::Tensor>& offsets, bool reverse,
                                   bool log_gates, bool exclusive, const at::Tensor& h_out) {
  TORCH_CHECK(a.device() == b.device(), "a: expected a tensor on ", b.device(),
              " (b's device), got ", a.device());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "a: expected the dtype of b (",
              dtype_name(b.scalar_type()), "), got ", dtype_name(a.scalar_type()));
  const auto t = b.scalar_type();
  TORCH_CHECK(at::isFloatingType(t) || at::isComplexType(t),
              "b: expected a floating or complex tensor, got ", dtype_name(t));
  TORCH_CHECK(b.dim() >= 1, "b: expected at least one dimension");
  TORCH_CHECK(at::is_expandable_to(a.sizes(), b.sizes()),
              "a: expected a shape broadcastable to b's ", b.sizes(), ", got ", a.sizes());
  const int64_t dim = wrap_dim(b, dim_in);
  const at::Tensor packed = checked_offsets(offsets, b, b.size(dim));

  PreparedAffine args;
  args.a = a.expand_as(b);
  args.b = b;
  if (h_out.defined()) check_output(h_out, b, "h", {a, b, initial_state.value_or(at::Tensor())});
  args.h = h_out.defined() ? h_out : at::empty_like(b);
  const auto sdtype = state_dtype(t);
  const auto shape = state_shape(b, dim, segment_count(offsets), offsets.has_value());
  args.initial = prepare_initial(initial_state, b, shape, sdtype);
  args.final_state = allocate_final(args.initial, shape, b.options().dtype(sdtype),
                                    offsets.has_value() || b.size(dim) == 0);
  args.offsets = packed;
  args.launch = b.numel() > 0;
  if (args.launch) {
    auto& call = args.call;
    call.rows = row_count(b, dim);
    const auto rows = set_engine_call(call, {args.b, args.a, args.h}, dim,
                                      make_geometry(call.rows, b.size(dim), packed, exclusive, reverse));
    call.a = args.a.const_data_ptr();
    call.b = args.b.const_data_ptr();
    call.h = args.h.data_ptr();
    call.initial = args.initial.defined() ? args.initial.const_data_ptr() : nullptr;
    call.final_state = args.final_state.data_ptr();
    call.b_rows = rows[0];
    call.a_rows = rows[1];
    call.h_rows = rows[2];
    call.log_gates = log_gates;
  }
  return args;
}

PreparedAffineGrad prepare_affine_scan_backward(const at::Tensor& a, const at::Tensor& h, const at::Tensor& grad_h,
                                                const c10::optional<at::Tensor>& grad_final,
                                                const c10::optional<at::Tensor>& initial_state, int64_t dim_in,
                                                bool reverse, bool log_gates, const at::Tensor& grad_a_out,
                                                const at::Tensor& grad_b_out) {
  TORCH_CHECK(a.device() == h.device() && grad_h.device() == h.device(),
              "_affine_scan_backward: expected a, h and grad_h on one device");
  TORCH_CHECK(a.scalar_type() == h.scalar_type() && grad_h.scalar_type() == h.scalar_type(),
              "_affine_scan_backward: expected a, h and grad_h of one dtype");
  TORCH_CHECK(grad_h.sizes() == h.sizes(), "grad_h: expected h's shape ", h.sizes(), ", got ", grad_h.sizes());
  TORCH_CHECK(at::is_expandable_to(a.sizes(), h.sizes()),
              "a: expected a shape broadcastable to h's ", h.sizes(), ", got ", a.sizes());
  const int64_t dim = wrap_dim(h, dim_in);
  const auto sdtype = state_dtype(h.scalar_type());
  const auto shape = state_shape(h, dim, 1, false);

  PreparedAffineGrad args;
  args.a = a.expand_as(h);
  args.h = h;
  args.grad_h = grad_h;
  args.initial = prepare_initial(initial_state, h, shape, sdtype);
  if (grad_final.has_value()) {
    TORCH_CHECK(grad_final->sizes() == at::IntArrayRef(shape), "grad_final: expected shape ",
                at::IntArrayRef(shape), ", got ", grad_final->sizes());
    args.grad_final = grad_final->to(h.device(), sdtype).contiguous();
  }
  // grad_b's buffer may not overlap grad_a's either (an undefined one is skipped).
  const std::vector<at::Tensor> read = {a, h, grad_h, grad_final.value_or(at::Tensor()),
                                        initial_state.value_or(at::Tensor()), grad_a_out};
  if (grad_a_out.defined()) check_output(grad_a_out, h, "grad_a", {read.begin(), read.end() - 1});
  if (grad_b_out.defined()) check_output(grad_b_out, h, "grad_b", read);
  args.grad_a = grad_a_out.defined() ? grad_a_out : at::empty_like(h);
  args.grad_b = grad_b_out.defined() ? grad_b_out : at::empty_like(h);
  // Rows of length 0 never reach the engine: their initial state's gradient is grad_final's.
  const bool empty_rows = h.size(dim) == 0;
  args.grad_initial = empty_rows ? (args.grad_final.defined() ? args.grad_final.clone()
                                                              : at::zeros(shape, h.options().dtype(sdtype)))
                                 : at::empty(shape, h.options().dtype(sdtype));
  args.launch = h.numel() > 0;
  if (args.launch) {
    auto& call = args.call;
    call.rows = row_count(h, dim);
    call.len = h.size(dim);
    const auto rows = set_engine_call(call, {args.h, args.a, args.grad_h, args.grad_a, args.grad_b}, dim,
                                      make_geometry(call.rows, h.size(dim), at::Tensor(), false, !reverse));
    call.h = args.h.const_data_ptr();
    call.a = args.a.const_data_ptr();
    call.grad_h = args.grad_h.const_data_ptr();
    call.grad_a = args.grad_a.data_ptr();
    call.grad_b = args.grad_b.data_ptr();
    call.grad_final = args.grad_final.defined() ? args.grad_final.const_data_ptr() : nullptr;
    call.initial = args.initial.defined() ? args.initial.const_data_ptr() : nullptr;
    call.grad_initial = args.grad_initial.data_ptr();
    call.h_rows = rows[0];
    call.a_rows = rows[1];
    call.grad_h_rows = rows[2];
    call.grad_a_rows = rows[3];
    call.grad_b_rows = rows[4];
    call.log_gates = log_gates;
    call.forward_reverse = reverse;
  }
  return args;
}

PreparedMatrixAffine prepare_matrix_affine_scan(const at::Tensor& A, const at::Tensor& b, int64_t dim_in,
                                                const c10::optional<at::Tensor>& initial_state,
                                                const c10::optional<at::Tensor>& offsets,
                                                bool reverse, bool exclusive) {
  TORCH_CHECK(A.device() == b.device(), "A: expected a tensor on ", b.device(), ", got ", A.device());
  TORCH_CHECK(A.scalar_type() == b.scalar_type(), "A: expected the dtype of b (",
              dtype_name(b.scalar_type()), "), got ", dtype_name(A.scalar_type()));
  TORCH_CHECK(b.scalar_type() == at::kFloat || b.scalar_type() == at::kDouble,
              "b: matrix_affine_scan expects torch.float32 or torch.float64, got ",
              dtype_name(b.scalar_type()));
  TORCH_CHECK(b.dim() >= 2, "b: expected shape (..., L, d), got ", b.sizes());
  const int64_t d = b.size(-1);
  TORCH_CHECK(d >= 1 && d <= 8, "b: expected a state size d in [1, 8] (the last dimension), got ", d);
  TORCH_CHECK(A.dim() >= 2 && A.size(-1) == d && A.size(-2) == d,
              "A: expected shape (..., L, d, d) with d = ", d, ", got ", A.sizes());
  auto lead = b.sizes().vec();
  lead.pop_back();
  auto A_lead = A.sizes().vec();
  A_lead.resize(A_lead.size() - 2);
  TORCH_CHECK(at::is_expandable_to(A_lead, lead),
              "A: expected leading dimensions broadcastable to b's ", at::IntArrayRef(lead),
              ", got ", at::IntArrayRef(A_lead));
  // `dim` counts all of b's dims (the state dim included), as every op and the Python wrapper
  // do; the engines see b's leading dims, in which it indexes the same dimension.
  const int64_t nd = b.dim();
  const int64_t dim = dim_in < 0 ? dim_in + nd : dim_in;
  TORCH_CHECK(dim >= 0 && dim < nd - 1,
              "dim: expected a time dimension of b other than its last (state) dimension, in [",
              -nd, ", ", nd - 2, "] for b of shape ", b.sizes(), " (the default -2 is the L of "
              "(..., L, d)), got ", dim_in);
  const auto b_lead = b.select(-1, 0);
  const at::Tensor packed = checked_offsets(offsets, b, b.size(dim));

  PreparedMatrixAffine args;
  auto A_shape = lead;
  A_shape.push_back(d);
  A_shape.push_back(d);
  args.A = A.expand(A_shape);
  args.b = b;
  args.h = at::empty_like(b);
  auto shape = state_shape(b_lead, dim, segment_count(offsets), offsets.has_value());
  shape.push_back(d);
  args.initial = prepare_initial(initial_state, b, shape, b.scalar_type());
  args.final_state = allocate_final(args.initial, shape, b.options(),
                                    offsets.has_value() || b.size(dim) == 0);
  args.offsets = packed;
  args.launch = b.numel() > 0;
  if (args.launch) {
    auto& call = args.call;
    call.rows = row_count(b_lead, dim);
    call.d = static_cast<int>(d);
    // Rows and the scanned dimension come from the leading dims (state dims dropped).
    const auto rows = set_engine_call(call, {b_lead, args.A.select(-1, 0).select(-1, 0), args.h.select(-1, 0)}, dim,
                                      make_geometry(call.rows, b.size(dim), packed, exclusive, reverse));
    call.A = args.A.const_data_ptr();
    call.b = args.b.const_data_ptr();
    call.h = args.h.data_ptr();
    call.initial = args.initial.defined() ? args.initial.const_data_ptr() : nullptr;
    call.final_state = args.final_state.data_ptr();
    call.b_rows = rows[0];
    call.A_rows = rows[1];
    call.h_rows = rows[2];
    call.A_row_stride = args.A.stride(-2);
    call.A_col_stride = args.A.stride(-1);
    call.b_stride = args.b.stride(-1);
    call.h_stride = args.h.stride(-1);
  }
  return args;
}

}  // namespace parprims::host
