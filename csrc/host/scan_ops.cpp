#include "scan_ops.h"

#include "scan_host.h"

namespace parprims::host {

namespace {

// A 0-d tensor scans as a 1-element vector.
at::Tensor as_vector_if_scalar(const at::Tensor& x) { return x.dim() == 0 ? x.reshape({1}) : x; }

ScanFn pick(const ScanBackend& be, ScanOp op) {
  switch (op) {
    case ScanOp::kAdd: return be.add;
    case ScanOp::kMul: return be.mul;
    case ScanOp::kMax: return be.max;
    case ScanOp::kMin: return be.min;
    case ScanOp::kLogAddExp: return be.logaddexp;
  }
  return nullptr;
}

ScanGeometry geometry_for(const at::Tensor& x, int64_t dim, const c10::optional<at::Tensor>& offsets,
                          bool exclusive, bool reverse) {
  return make_geometry(row_count(x, dim), x.size(dim), offsets, exclusive, reverse);
}

}  // namespace

void check_offsets_for(bool always_validate, const c10::optional<at::Tensor>& offsets,
                       const at::Tensor& data, int64_t len) {
  if (!offsets.has_value()) return;
  check_offsets_arg(*offsets, data, len, always_validate || checks_enabled());
}

at::Tensor scan(const ScanBackend& be, const at::Tensor& x_in, const c10::optional<at::Tensor>& offsets,
                int64_t dim_in, const std::string& op_name, bool exclusive, bool reverse) {
  const ScanOp op = parse_scan_op(op_name);
  check_scan_dtype(op, x_in.scalar_type());
  const at::Tensor x = as_vector_if_scalar(x_in);
  const int64_t dim = wrap_dim(x, dim_in);
  check_offsets_for(be.always_validate_offsets, offsets, x, x.size(dim));
  auto out = at::empty_like(x, x.options().dtype(scan_output_dtype(op, x.scalar_type())));
  if (x.numel() > 0) pick(be, op)(x, out, dim, geometry_for(x, dim, offsets, exclusive, reverse));
  return x_in.dim() == 0 ? out.reshape({}) : out;
}

std::tuple<at::Tensor, at::Tensor> scan_with_indices(const ScanBackend& be, const at::Tensor& x_in,
                                                     const c10::optional<at::Tensor>& offsets,
                                                     int64_t dim_in, const std::string& op_name,
                                                     bool exclusive, bool reverse) {
  const ScanOp op = parse_scan_op(op_name);
  TORCH_CHECK(op == ScanOp::kMax || op == ScanOp::kMin,
              "op: scans with indices take 'max' or 'min', got '", op_name, "'");
  TORCH_CHECK(at::isFloatingType(x_in.scalar_type()),
              "x: scans with indices expect a floating tensor, got ", x_in.scalar_type());
  const at::Tensor x = as_vector_if_scalar(x_in);
  const int64_t dim = wrap_dim(x, dim_in);
  check_offsets_for(be.always_validate_offsets, offsets, x, x.size(dim));
  auto out = at::empty_like(x);
  auto index = at::empty_like(x, x.options().dtype(at::kLong));
  if (x.numel() > 0) {
    be.arg(op == ScanOp::kMax, x, out, index, dim, geometry_for(x, dim, offsets, exclusive, reverse));
  }
  if (x_in.dim() == 0) return {out.reshape({}), index.reshape({})};
  return {out, index};
}

std::tuple<at::Tensor, at::Tensor> scan_bicyclic(const ScanBackend& be, const at::Tensor& p,
                                                 const at::Tensor& q,
                                                 const c10::optional<at::Tensor>& offsets,
                                                 int64_t dim_in, bool exclusive, bool reverse) {
  TORCH_CHECK(p.scalar_type() == at::kLong && q.scalar_type() == at::kLong,
              "p, q: expected int64 tensors");
  TORCH_CHECK(p.sizes() == q.sizes(), "p, q: expected the same shape, got ", p.sizes(), " and ",
              q.sizes());
  TORCH_CHECK(p.dim() >= 1, "p: expected at least one dimension");
  const int64_t dim = wrap_dim(p, dim_in);
  check_offsets_for(be.always_validate_offsets, offsets, p, p.size(dim));
  auto p_out = at::empty_like(p);
  auto q_out = at::empty_like(q);
  if (p.numel() > 0) {
    be.bicyclic(p, q, p_out, q_out, dim, geometry_for(p, dim, offsets, exclusive, reverse));
  }
  return {p_out, q_out};
}

}  // namespace parprims::host
