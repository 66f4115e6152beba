#include "reduce_host.h"

#include <ATen/core/Scalar.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <cmath>

#include "reduce_dispatch.h"

namespace parprims::host {

ReduceOp parse_reduce_op(c10::string_view op) {
  if (op == "sum") return ReduceOp::kSum;
  if (op == "mean") return ReduceOp::kMean;
  if (op == "max") return ReduceOp::kMax;
  if (op == "min") return ReduceOp::kMin;
  if (op == "prod") return ReduceOp::kProd;
  if (op == "logsumexp") return ReduceOp::kLogSumExp;
  TORCH_CHECK(false, "op: expected one of 'sum', 'mean', 'max', 'min', 'prod', 'logsumexp', got '", op, "'");
}

at::ScalarType reduce_output_dtype(ReduceOp op, at::ScalarType in) {
  const bool integral = at::isIntegralType(in, /*includeBool=*/true);
  if ((op == ReduceOp::kSum || op == ReduceOp::kProd) && integral) return at::kLong;
  return in;
}

namespace {

bool is_floating(at::ScalarType t) {
  return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat || t == at::kDouble;
}

void check_reduce_dtype(ReduceOp op, at::ScalarType in) {
  const bool integral = in == at::kInt || in == at::kLong || in == at::kBool;
  if (op == ReduceOp::kMean || op == ReduceOp::kLogSumExp) {
    TORCH_CHECK(is_floating(in), "x: ops 'mean' and 'logsumexp' expect a floating tensor (float16, bfloat16, "
                "float32, float64), got ", dtype_name(in));
  } else {
    TORCH_CHECK(is_floating(in) || integral, "x: ops 'sum', 'max', 'min' and 'prod' expect a floating, int32, "
                "int64 or bool tensor, got ", dtype_name(in));
  }
}

// Whether a tensor of shape `from` expands to `to` (trailing dims aligned, size 1 or equal).
bool broadcasts_to(at::IntArrayRef from, at::IntArrayRef to) {
  if (from.size() > to.size()) return false;
  const size_t lead = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    if (from[d] != 1 && from[d] != to[lead + d]) return false;
  }
  return true;
}

// A 0-d tensor reduces as a 1-element vector.
at::Tensor as_vector_if_scalar(const at::Tensor& x) { return x.dim() == 0 ? x.reshape({1}) : x; }

// The output of reducing `in` along `dim` into `positions` places along it.
at::Tensor reduction_output(const at::Tensor& in, int64_t dim, int64_t positions, ReduceOp op) {
  auto shape = in.sizes().vec();
  shape[dim] = positions;
  return at::empty(shape, in.options().dtype(reduce_output_dtype(op, in.scalar_type())));
}

// An engine that runs nothing: the dtype dispatch hands it the problem of a call, and it keeps
// what an empty segment gives for that problem's monoid (ReduceTraits::empty_result). The
// device's engine type sets the accumulate type, as in the real dispatch; the value does not
// depend on it.
struct EmptyResultOf {
  static constexpr bool kIsCuda = false;
  at::Scalar* value;
  template <class P>
  void operator()(const P&, const ScanGeometry&, const ScanLayout&) const {
    *value = at::Scalar(ReduceTraits<typename P::Monoid>::empty_result());
  }
};

// Fills `out` with the empty result, then the plain call from the prepared tensors, and runs
// the reduction when there is something to reduce.
void fill_and_run(PreparedReduce& c, int64_t dim, ReduceRunner run) {
  auto& call = c.call;
  call.dtype = c.in.scalar_type();
  at::Scalar empty;
  dispatch_reduce(call, EmptyResultOf{&empty});
  c.out.fill_(empty);
  // No outputs (no sequences) leaves nothing to do; on CUDA, unvalidated offsets may then
  // still claim elements, and the engine's segment search needs at least one segment.
  if (c.in.numel() == 0 || c.out.numel() == 0) return;
  std::vector<at::Tensor> operands{c.in, c.out};
  if (c.mask.defined()) operands.push_back(c.mask);
  const auto rows = set_engine_call(call, operands, dim, call.geometry);
  call.layout = classify_layout(&rows[0], 1, call.geometry.len);  // the input's alone (reduce_call.h)
  call.in = c.in.const_data_ptr();
  call.out = c.out.data_ptr();
  call.in_rows = rows[0];
  call.out_rows = rows[1];
  if (c.mask.defined()) {
    call.mask = c.mask.const_data_ptr<bool>();
    call.mask_rows = rows[2];
  }
  run(c);
}

}  // namespace

at::Tensor segment_reduce(const at::Tensor& x, const at::Tensor& offsets, c10::string_view op_name, int64_t dim,
                          ReduceRunner run) {
  PreparedReduce c;
  const ReduceOp op = c.call.op = parse_reduce_op(op_name);
  check_reduce_dtype(op, x.scalar_type());
  TORCH_CHECK(x.dim() >= 1, "x: expected at least one dimension (the packed one), got a 0-d tensor");
  c.in = x;
  dim = wrap_dim(x, dim);
  c.offsets = checked_offsets(offsets, x, x.size(dim));
  const int64_t segments = c.offsets.numel() - 1;
  c.out = reduction_output(x, dim, segments, op);
  c.result = c.out;
  c.call.geometry = make_geometry(row_count(x, dim), x.size(dim), c.offsets, false, false);
  fill_and_run(c, dim, run);
  return c.result;
}

at::Tensor reduce(const at::Tensor& x, int64_t dim, c10::string_view op_name, const std::optional<at::Tensor>& mask,
                  bool keepdim, ReduceRunner run) {
  PreparedReduce c;
  const ReduceOp op = c.call.op = parse_reduce_op(op_name);
  check_reduce_dtype(op, x.scalar_type());
  c.in = as_vector_if_scalar(x);
  dim = wrap_dim(c.in, dim);
  if (mask.has_value()) {
    TORCH_CHECK(mask->scalar_type() == at::kBool, "mask: expected a torch.bool tensor, got ",
                dtype_name(mask->scalar_type()));
    TORCH_CHECK(mask->device() == x.device(), "mask: expected a tensor on ", x.device(), " (x's device), got ",
                mask->device());
    TORCH_CHECK(broadcasts_to(mask->sizes(), x.sizes()), "mask: expected a shape broadcastable to x's ",
                x.sizes(), ", got ", mask->sizes());
    c.mask = as_vector_if_scalar(mask->expand(x.sizes()));
  }
  c.out = reduction_output(c.in, dim, 1, op);
  c.result = x.dim() == 0 ? c.out.reshape({}) : keepdim ? c.out : c.out.squeeze(dim);
  c.call.geometry = make_geometry(row_count(c.in, dim), c.in.size(dim), at::Tensor(), false, false);
  fill_and_run(c, dim, run);
  return c.result;
}

namespace {

// The checks and fields that histogram and its bin indices share.
PreparedHistogram prepare_bins(const at::Tensor& x, int64_t bins, double lo, double hi,
                               const std::optional<at::Tensor>& offsets) {
  TORCH_CHECK(is_floating(x.scalar_type()), "x: expected a floating tensor (float16, bfloat16, float32, float64), "
              "got ", dtype_name(x.scalar_type()));
  TORCH_CHECK(bins >= 1, "bins: expected a positive number of bins, got ", bins);
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo < hi, "range: expected finite (lo, hi) with lo < hi, got (",
              lo, ", ", hi, ")");
  PreparedHistogram c;
  c.bins = bins;
  c.lo = lo;
  c.hi = hi;
  if (offsets.has_value()) {
    TORCH_CHECK(x.dim() == 1, "x: histograms per sequence (offsets) take a 1-D packed x, got shape ", x.sizes());
    c.offsets = checked_offsets(offsets, x, x.size(0));
  }
  c.x = x.reshape({-1}).contiguous();
  return c;
}

}  // namespace

at::Tensor histogram_bin_index(const at::Tensor& x, int64_t bins, double lo, double hi,
                               const std::optional<at::Tensor>& offsets, HistogramRunner run) {
  PreparedHistogram c = prepare_bins(x, bins, lo, hi, offsets);
  // No sequences: every value is skipped (only unvalidated CUDA offsets get here with values).
  const bool no_sequences = c.offsets.defined() && c.offsets.numel() == 1;
  c.index = no_sequences ? at::full({c.x.numel()}, -1, x.options().dtype(at::kLong))
                         : at::empty({c.x.numel()}, x.options().dtype(at::kLong));
  if (c.x.numel() > 0 && !no_sequences) run(c);
  return c.index.view(x.sizes());
}

at::Tensor histogram(const at::Tensor& x, int64_t bins, double lo, double hi, const std::optional<at::Tensor>& weights,
                     const std::optional<at::Tensor>& offsets, HistogramRunner run) {
  PreparedHistogram c = prepare_bins(x, bins, lo, hi, offsets);
  at::ScalarType out_dtype = at::kLong;
  if (weights.has_value()) {
    const auto wt = weights->scalar_type();
    TORCH_CHECK(is_floating(wt), "weights: expected a floating tensor (float16, bfloat16, float32, float64), got ",
                dtype_name(wt));
    TORCH_CHECK(weights->sizes() == x.sizes(), "weights: expected x's shape ", x.sizes(), ", got ", weights->sizes());
    TORCH_CHECK(weights->device() == x.device(), "weights: expected a tensor on ", x.device(),
                " (x's device), got ", weights->device());
    out_dtype = wt == at::kDouble ? at::kDouble : at::kFloat;
    // Weights arrive in the accumulate dtype, so that the kernels dispatch on x's dtype only.
    c.weights = weights->reshape({-1}).to(out_dtype).contiguous();
  }
  const int64_t rows = c.offsets.defined() ? c.offsets.numel() - 1 : 1;
  c.out = at::zeros({rows, bins}, x.options().dtype(out_dtype));
  c.result = offsets.has_value() ? c.out : c.out.view({bins});
  if (c.x.numel() > 0 && rows > 0) run(c);
  return c.result;
}

}  // namespace parprims::host
