#include "scan_host.h"

#include <ATen/Context.h>

#include <atomic>
#include <cstdlib>

namespace parprims::host {

ScanOp parse_scan_op(const std::string& op) {
  if (op == "add") return ScanOp::kAdd;
  if (op == "mul") return ScanOp::kMul;
  if (op == "max") return ScanOp::kMax;
  if (op == "min") return ScanOp::kMin;
  if (op == "logaddexp") return ScanOp::kLogAddExp;
  TORCH_CHECK(false, "op: expected one of 'add', 'mul', 'max', 'min', 'logaddexp', got '", op, "'");
}

int64_t wrap_dim(const at::Tensor& x, int64_t dim, const char* arg) {
  const int64_t nd = std::max<int64_t>(x.dim(), 1);
  TORCH_CHECK(dim >= -nd && dim < nd, arg, ": expected a dimension in [", -nd, ", ", nd - 1,
              "] for a tensor of ", x.dim(), " dimensions, got ", dim);
  return dim < 0 ? dim + nd : dim;
}

std::vector<RowIndexer> row_indexers(const std::vector<at::Tensor>& operands, int64_t dim) {
  const auto& shape = operands.front().sizes();
  const int64_t nd = static_cast<int64_t>(shape.size());
  // Row dimensions in order, dropping size-1 ones; each entry: (size, stride per operand).
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides(operands.size());
  for (int64_t d = 0; d < nd; ++d) {
    if (d == dim || shape[d] == 1) continue;
    const bool collapse = !sizes.empty() && [&] {
      for (size_t k = 0; k < operands.size(); ++k) {
        if (strides[k].back() != operands[k].stride(d) * shape[d]) return false;
      }
      return true;
    }();
    for (size_t k = 0; k < operands.size(); ++k) {
      if (collapse) strides[k].back() = operands[k].stride(d);
      else strides[k].push_back(operands[k].stride(d));
    }
    if (collapse) sizes.back() *= shape[d];
    else sizes.push_back(shape[d]);
  }
  TORCH_CHECK(static_cast<int>(sizes.size()) <= kMaxRowDims, "tensors whose non-scanned "
              "dimensions do not collapse to at most ", kMaxRowDims, " strided dimensions are "
              "not supported; call .contiguous() first");
  std::vector<RowIndexer> out(operands.size());
  for (size_t k = 0; k < operands.size(); ++k) {
    out[k].ndim = static_cast<int>(sizes.size());
    for (size_t d = 0; d < sizes.size(); ++d) {
      out[k].sizes[d] = sizes[d];
      out[k].strides[d] = strides[k][d];
    }
    out[k].stride_len = nd == 0 ? 1 : operands[k].stride(dim);
  }
  return out;
}

int64_t row_count(const at::Tensor& x, int64_t dim) {
  int64_t rows = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d != dim) rows *= x.size(d);
  }
  return rows;
}

void validate_offsets(const at::Tensor& offsets, int64_t total) {
  const auto o = offsets.to(at::kLong);
  const int64_t n = o.numel();
  TORCH_CHECK(n >= 1, "offsets: expected at least one entry (offsets[0] == 0)");
  // One host read of three flags, so that a bad tensor fails with the precise reason.
  const auto first = o.select(0, 0);
  const auto last = o.select(0, n - 1);
  const auto nondecreasing = n > 1 ? (o.slice(0, 1) >= o.slice(0, 0, n - 1)).all()
                                   : at::ones({}, o.options().dtype(at::kBool));
  const auto flags = at::stack({first.eq(0), nondecreasing, last.eq(total)}).cpu();
  const bool* f = flags.data_ptr<bool>();
  TORCH_CHECK(f[0], "offsets: expected offsets[0] == 0, got ", first.item<int64_t>());
  TORCH_CHECK(f[1], "offsets: expected non-decreasing values");
  TORCH_CHECK(f[2], "offsets: expected offsets[-1] == ", total,
              " (the length of the scanned dimension), got ", last.item<int64_t>());
}

void check_offsets_arg(const at::Tensor& offsets, const at::Tensor& data, int64_t len,
                       bool validate_values) {
  TORCH_CHECK(offsets.scalar_type() == at::kInt || offsets.scalar_type() == at::kLong,
              "offsets: expected an int32 or int64 tensor, got ", offsets.scalar_type());
  TORCH_CHECK(offsets.dim() == 1 && offsets.numel() >= 1,
              "offsets: expected a 1-D tensor of length num_sequences + 1, got shape ",
              offsets.sizes());
  TORCH_CHECK(offsets.device() == data.device(), "offsets: expected a tensor on ",
              data.device(), " (the data's device), got ", offsets.device());
  if (validate_values) validate_offsets(offsets, len);
}

namespace {
std::atomic<bool>& checks_flag() {
  static std::atomic<bool> flag{[] {
    const char* env = std::getenv("PARPRIMS_CHECKS");
    return env != nullptr && std::string(env) != "0" && std::string(env) != "";
  }()};
  return flag;
}
}  // namespace

bool checks_enabled() { return checks_flag().load(); }
void set_checks_enabled(bool on) { checks_flag().store(on); }

ScanGeometry make_geometry(int64_t rows, int64_t len, const c10::optional<at::Tensor>& offsets,
                           bool exclusive, bool reverse) {
  ScanGeometry g;
  g.rows = rows;
  g.len = len;
  g.exclusive = exclusive;
  g.reverse = reverse;
  g.deterministic = at::globalContext().deterministicAlgorithms();
  if (offsets.has_value()) {
    g.segments.offsets = offsets->data_ptr();
    g.segments.offsets_are_int64 = offsets->scalar_type() == at::kLong;
    g.segments.num_segments = offsets->numel() - 1;
  }
  return g;
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
                  "x: op 'add' expects a floating, complex, int32, int64 or bool tensor, got ", in);
      break;
    case ScanOp::kMax:
    case ScanOp::kMin:
      TORCH_CHECK(floating || integral, "x: ops 'max' and 'min' expect a floating, int32, int64 "
                  "or bool tensor, got ", in);
      break;
    case ScanOp::kMul:
    case ScanOp::kLogAddExp:
      TORCH_CHECK(floating, "x: ops 'mul' and 'logaddexp' expect a floating tensor "
                  "(float16, bfloat16, float32, float64), got ", in);
      break;
  }
}

}  // namespace parprims::host
