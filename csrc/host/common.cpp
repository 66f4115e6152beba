#include "common.h"

#include <ATen/Context.h>
#include <ATen/MemoryOverlap.h>

#include <atomic>
#include <cctype>
#include <cstdlib>

namespace parprims::host {

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kBool: return "torch.bool";
    case at::kByte: return "torch.uint8";
    case at::kChar: return "torch.int8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kComplexHalf: return "torch.complex32";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    case at::kUInt16: return "torch.uint16";
    case at::kUInt32: return "torch.uint32";
    case at::kUInt64: return "torch.uint64";
    default: {
      // The rarer dtypes (float8 variants, quantized ints): c10's name, lower-cased, which is
      // torch's for float8 ("Float8_e4m3fn" -> "torch.float8_e4m3fn").
      std::string name = c10::toString(t);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return "torch." + name;
    }
  }
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

namespace {

// offsets[k] of a 1-D int32/int64 CPU tensor of any stride.
struct OffsetsReader {
  const void* data;
  int64_t stride;
  bool is_int64;
  int64_t operator[](int64_t k) const {
    return is_int64 ? static_cast<const int64_t*>(data)[k * stride]
                    : static_cast<int64_t>(static_cast<const int32_t*>(data)[k * stride]);
  }
};

// Passing sequence lengths instead of boundaries is the usual mistake: say so when the values
// are non-negative and add up to the total.
std::string lengths_hint(const OffsetsReader& o, int64_t n, int64_t total) {
  int64_t sum = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (o[k] < 0 || o[k] > total - sum) return "";
    sum += o[k];
  }
  if (sum != total) return "";
  return ". These look like sequence lengths: offsets are cumulative sequence boundaries "
         "(cu_seqlens), starting at 0: use torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])";
}

}  // namespace

void validate_offsets(const at::Tensor& offsets, int64_t total, const char* name) {
  // One plain pass over the values (a single device-to-host copy for CUDA offsets), reading
  // through the stride: offsets may be a non-contiguous view.
  const at::Tensor host = offsets.is_cpu() ? offsets : offsets.to(at::kCPU);
  const int64_t n = host.numel();
  TORCH_CHECK(n >= 1, name, ": expected at least one entry (offsets[0] == 0)");
  const OffsetsReader o{host.const_data_ptr(), host.stride(0), host.scalar_type() == at::kLong};
  if (o[0] != 0) {
    TORCH_CHECK(false, name, ": expected offsets[0] == 0, got ", o[0], lengths_hint(o, n, total));
  }
  for (int64_t k = 0; k + 1 < n; ++k) {
    if (o[k] > o[k + 1]) {
      TORCH_CHECK(false, name, ": expected non-decreasing values, got offsets[", k, "] = ", o[k],
                  " > offsets[", k + 1, "] = ", o[k + 1], lengths_hint(o, n, total));
    }
  }
  TORCH_CHECK(o[n - 1] == total, name, ": expected offsets[-1] == ", total,
              " (the length of the scanned dimension), got ", o[n - 1], " (offsets[", n - 1, "])",
              lengths_hint(o, n, total));
}

void check_offsets_arg(const at::Tensor& offsets, const at::Tensor& data, int64_t len,
                       bool validate_values, const char* name) {
  TORCH_CHECK(offsets.scalar_type() == at::kInt || offsets.scalar_type() == at::kLong,
              name, ": expected an int32 or int64 tensor, got ", dtype_name(offsets.scalar_type()));
  TORCH_CHECK(offsets.dim() == 1 && offsets.numel() >= 1,
              name, ": expected a 1-D tensor of length num_sequences + 1, got shape ",
              offsets.sizes());
  TORCH_CHECK(offsets.device() == data.device(), name, ": expected a tensor on ",
              data.device(), " (the data's device), got ", offsets.device());
  if (validate_values) validate_offsets(offsets, len, name);
}

at::Tensor checked_offsets(const c10::optional<at::Tensor>& offsets, const at::Tensor& data, int64_t len,
                           const char* name) {
  if (!offsets.has_value()) return at::Tensor();
  // CPU offsets cost one loop to validate; CUDA ones a sync, so only when checks are on.
  check_offsets_arg(*offsets, data, len, offsets->is_cpu() || checks_enabled(), name);
  return offsets->contiguous();
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

ScanGeometry make_geometry(int64_t rows, int64_t len, const at::Tensor& offsets, bool exclusive,
                           bool reverse) {
  ScanGeometry g;
  g.rows = rows;
  g.len = len;
  g.exclusive = exclusive;
  g.reverse = reverse;
  g.deterministic = at::globalContext().deterministicAlgorithms();
  if (offsets.defined()) {
    TORCH_INTERNAL_ASSERT(offsets.is_contiguous());
    g.segments.offsets = offsets.const_data_ptr();
    g.segments.offsets_are_int64 = offsets.scalar_type() == at::kLong;
    g.segments.num_segments = offsets.numel() - 1;
  }
  return g;
}

std::vector<RowIndexer> set_engine_call(EngineCall& call, const std::vector<at::Tensor>& operands, int64_t dim,
                                        const ScanGeometry& geometry) {
  call.dtype = operands.front().scalar_type();
  call.geometry = geometry;
  auto rows = row_indexers(operands, dim);
  call.layout = classify_layout(rows.data(), static_cast<int>(rows.size()), geometry.len);
  return rows;
}

void check_output(const at::Tensor& out, const at::Tensor& like, const char* name,
                  const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(out.device() == like.device(), name, ": expected a tensor on ", like.device(), ", got ", out.device());
  TORCH_CHECK(out.scalar_type() == like.scalar_type(), name, ": expected dtype ", dtype_name(like.scalar_type()),
              ", got ", dtype_name(out.scalar_type()));
  TORCH_CHECK(out.sizes() == like.sizes(), name, ": expected shape ", like.sizes(), ", got ", out.sizes());
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, name,
              ": written in place, so its elements must not overlap in memory (an expanded tensor?)");
  for (const auto& input : inputs) {
    if (!input.defined()) continue;
    const auto status = at::get_overlap_status(out, input);
    TORCH_CHECK(status != at::MemOverlapStatus::Full && status != at::MemOverlapStatus::Partial, name,
                ": written while the op reads its inputs, so it must not share memory with them");
  }
}

}  // namespace parprims::host
