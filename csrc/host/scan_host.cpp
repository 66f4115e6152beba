#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>
#include "scan_host.h"

namespace parprims::host {

ScanOp parse_scan_op(c10::string_view op) {
  if (op == "add") return ScanOp::kAdd;
  if (op == "mul") return ScanOp::kMul;
  if (op == "max") return ScanOp::kMax;
  if (op == "min") return ScanOp::kMin;
  if (op == "logaddexp") return ScanOp::kLogAddExp;
  TORCH_CHECK(false, "op: expected one of 'add', 'mul', 'max', 'min', 'logaddexp', got '", op, "'");
}

at::ScalarType scan_output_dtype(ScanOp op, at::ScalarType in) {
  if (op == ScanOp::kAdd && (at::isIntegralType(in, /*includeBool=*/true))) return at::kLong;
  return in;
}

void check_scan_dtype(ScanOp op, at::ScalarType in) {
  const bool floating = in == at::kHalf || in == at::kBFloat16 || in == at::kFloat || in == at::kDouble;
  const bool integral = in == at::kInt || in == at::kLong || in == at::kBool;
  switch (op) {
    case ScanOp::kAdd:
      TORCH_CHECK(floating || integral || in == at::kComplexFloat || in == at::kComplexDouble,
                  "x: op 'add' expects a floating, complex, int32, int64 or bool tensor, got ",
                  dtype_name(in));
      break;
    case ScanOp::kMax:
    case ScanOp::kMin:
      TORCH_CHECK(floating || integral, "x: ops 'max' and 'min' expect a floating, int32, int64 "
                  "or bool tensor, got ", dtype_name(in));
      break;
    case ScanOp::kMul:
    case ScanOp::kLogAddExp:
      TORCH_CHECK(floating, "x: ops 'mul' and 'logaddexp' expect a floating tensor "
                  "(float16, bfloat16, float32, float64), got ", dtype_name(in));
      break;
  }
}

namespace {

// A 0-d tensor scans as a 1-element vector.
at::Tensor as_vector_if_scalar(const at::Tensor& x) { return x.dim() == 0 ? x.reshape({1}) : x; }

ScanGeometry geometry_for(const at::Tensor& x, int64_t dim, const at::Tensor& offsets, bool exclusive,
                          bool reverse) {
  return make_geometry(row_count(x, dim), x.size(dim), offsets, exclusive, reverse);
}


}  // namespace

PreparedScan prepare_scan(const at::Tensor& x_in, const c10::optional<at::Tensor>& offsets,
                          int64_t dim_in, c10::string_view op_name, bool exclusive, bool reverse) {
  PreparedScan c;
  c.op = parse_scan_op(op_name);
  check_scan_dtype(c.op, x_in.scalar_type());
  c.in = as_vector_if_scalar(x_in);
  const int64_t dim = wrap_dim(c.in, dim_in);
  c.offsets = checked_offsets(offsets, c.in, c.in.size(dim));
  c.out = at::empty_like(c.in, c.in.options().dtype(scan_output_dtype(c.op, x_in.scalar_type())));
  c.result = x_in.dim() == 0 ? c.out.reshape({}) : c.out;
  c.launch = c.in.numel() > 0;
  if (c.launch) {
    const auto rows = set_engine_call(c.call, {c.in, c.out}, dim, geometry_for(c.in, dim, c.offsets, exclusive, reverse));
    c.call.in = c.in.const_data_ptr();
    c.call.out = c.out.data_ptr();
    c.call.in_rows = rows[0];
    c.call.out_rows = rows[1];
  }
  return c;
}

PreparedScanWithIndices prepare_scan_with_indices(const at::Tensor& x_in,
                                                  const c10::optional<at::Tensor>& offsets,
                                                  int64_t dim_in, c10::string_view op_name,
                                                  bool exclusive, bool reverse) {
  const ScanOp op = parse_scan_op(op_name);
  TORCH_CHECK(op == ScanOp::kMax || op == ScanOp::kMin,
              "op: scans with indices take 'max' or 'min', got '", op_name, "'");
  TORCH_CHECK(at::isFloatingType(x_in.scalar_type()),
              "x: scans with indices expect a floating tensor, got ", dtype_name(x_in.scalar_type()));
  PreparedScanWithIndices c;
  c.in = as_vector_if_scalar(x_in);
  const int64_t dim = wrap_dim(c.in, dim_in);
  c.offsets = checked_offsets(offsets, c.in, c.in.size(dim));
  c.out = at::empty_like(c.in);
  c.index = at::empty_like(c.in, c.in.options().dtype(at::kLong));
  c.result = x_in.dim() == 0 ? std::make_tuple(c.out.reshape({}), c.index.reshape({}))
                             : std::make_tuple(c.out, c.index);
  c.launch = c.in.numel() > 0;
  if (c.launch) {
    const auto rows = set_engine_call(c.call, {c.in, c.out, c.index}, dim,
                                      geometry_for(c.in, dim, c.offsets, exclusive, reverse));
    c.call.is_max = op == ScanOp::kMax;
    c.call.in = c.in.const_data_ptr();
    c.call.out = c.out.data_ptr();
    c.call.index = c.index.data_ptr<int64_t>();
    c.call.in_rows = rows[0];
    c.call.out_rows = rows[1];
    c.call.index_rows = rows[2];
  }
  return c;
}

namespace {

// A byte a position along the scanned dim, 1 at each packed sequence's first step in scan
// order (offsets[k]; offsets[k + 1] - 1 in reverse), built on the device without a sync. An empty
// sequence marks a position where a neighbouring sequence starts anyway, or one just outside
// the dim (len, or -1 in reverse: both land in one spare slot at the end, dropped; the marks
// keep the allocation's alignment for wide loads).
at::Tensor sequence_starts(const at::Tensor& offsets, int64_t len, bool reverse) {
  const auto first = reverse ? offsets.slice(0, 1).sub(1).remainder(len + 1) : offsets.slice(0, 0, -1);
  auto marks = at::zeros({len + 1}, offsets.options().dtype(at::kByte));
  marks.index_fill_(0, first.to(at::kLong), 1);
  return marks.slice(0, 0, len);
}

}  // namespace

PreparedExtremeScanGrad prepare_scan_extreme_backward(const at::Tensor& grad_in, const at::Tensor& out_in,
                                                      const c10::optional<at::Tensor>& offsets, int64_t dim_in,
                                                      bool exclusive, bool reverse) {
  TORCH_CHECK(grad_in.device() == out_in.device(), "_scan_extreme_backward: expected grad and out on one device");
  TORCH_CHECK(at::isFloatingType(out_in.scalar_type()) && grad_in.scalar_type() == out_in.scalar_type(),
              "_scan_extreme_backward: expected floating grad and out of one dtype, got ",
              dtype_name(grad_in.scalar_type()), " and ", dtype_name(out_in.scalar_type()));
  TORCH_CHECK(grad_in.sizes() == out_in.sizes(), "grad: expected out's shape ", out_in.sizes(), ", got ",
              grad_in.sizes());
  PreparedExtremeScanGrad c;
  c.grad = as_vector_if_scalar(grad_in);
  c.out = as_vector_if_scalar(out_in);
  const int64_t dim = wrap_dim(c.out, dim_in);
  const at::Tensor checked = checked_offsets(offsets, c.out, c.out.size(dim));
  c.grad_in = at::empty_like(c.out);
  c.result = out_in.dim() == 0 ? c.grad_in.reshape({}) : c.grad_in;
  c.launch = c.out.numel() > 0;
  if (c.launch) {
    auto& call = c.call;
    if (checked.defined()) {
      c.starts = sequence_starts(checked, c.out.size(dim), reverse);
      call.starts = c.starts.const_data_ptr<uint8_t>();
    }
    const int64_t rows = row_count(c.out, dim);
    const auto indexers = set_engine_call(call, {c.out, c.grad, c.grad_in}, dim,
                                          make_geometry(rows, c.out.size(dim), at::Tensor(), false, !reverse));
    call.out = c.out.const_data_ptr();
    call.grad = c.grad.const_data_ptr();
    call.grad_in = c.grad_in.data_ptr();
    call.out_rows = indexers[0];
    call.grad_rows = indexers[1];
    call.grad_in_rows = indexers[2];
    call.len = c.out.size(dim);
    call.exclusive = exclusive;
    call.forward_reverse = reverse;
  }
  return c;
}

PreparedBicyclic prepare_scan_bicyclic(const at::Tensor& p, const at::Tensor& q,
                                       const c10::optional<at::Tensor>& offsets, int64_t dim_in,
                                       bool exclusive, bool reverse) {
  TORCH_CHECK(p.scalar_type() == at::kLong && q.scalar_type() == at::kLong,
              "p, q: expected torch.int64 tensors, got ", dtype_name(p.scalar_type()), " and ",
              dtype_name(q.scalar_type()));
  TORCH_CHECK(p.sizes() == q.sizes(), "p, q: expected the same shape, got ", p.sizes(), " and ",
              q.sizes());
  TORCH_CHECK(p.dim() >= 1, "p: expected at least one dimension");
  PreparedBicyclic c;
  const int64_t dim = wrap_dim(p, dim_in);
  c.offsets = checked_offsets(offsets, p, p.size(dim));
  c.p_in = p;
  c.q_in = q;
  c.p_out = at::empty_like(p);
  c.q_out = at::empty_like(q);
  c.launch = p.numel() > 0;
  if (c.launch) {
    const auto rows = set_engine_call(c.call, {c.p_in, c.q_in, c.p_out, c.q_out}, dim,
                                      geometry_for(c.p_in, dim, c.offsets, exclusive, reverse));
    c.call.p_in = c.p_in.const_data_ptr<int64_t>();
    c.call.q_in = c.q_in.const_data_ptr<int64_t>();
    c.call.p_out = c.p_out.data_ptr<int64_t>();
    c.call.q_out = c.q_out.data_ptr<int64_t>();
    c.call.p_in_rows = rows[0];
    c.call.q_in_rows = rows[1];
    c.call.p_out_rows = rows[2];
    c.call.q_out_rows = rows[3];
  }
  return c;
}

}  // namespace parprims::host
