#include "compact_host.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <cstring>

#include "../include/parprims/ops.h"

namespace parprims::host {

namespace {

void check_mask(const at::Tensor& mask, const at::Tensor& x, const char* name = "mask") {
  TORCH_CHECK(mask.scalar_type() == at::kBool, name, ": expected a torch.bool tensor, got ",
              dtype_name(mask.scalar_type()));
  TORCH_CHECK(mask.device() == x.device(), name, ": expected a tensor on ", x.device(),
              " (x's device), got ", mask.device());
}

void check_capacity(int64_t capacity) {
  TORCH_CHECK(capacity >= 0, "capacity: expected a non-negative number of slots, got ", capacity);
}

// Whether `mask` selects elements of `x` (the same shape) rather than slices along `dim`
// (a 1-D mask of x's size along `dim`). A 1-D x is both: its elements are its slices.
bool selects_elements(const at::Tensor& x, const at::Tensor& mask, int64_t dim) {
  wrap_dim(x, dim);  // checked for both masks, so that the backward (which takes dim) agrees
  if (mask.sizes() == x.sizes()) return true;
  TORCH_CHECK(x.dim() >= 1 && mask.dim() == 1 && mask.size(0) == x.size(wrap_dim(x, dim)),
              "mask: expected x's shape ", x.sizes(), " (elementwise) or [",
              x.dim() >= 1 ? x.size(wrap_dim(x, dim)) : 1, "] (x's size along dim ", dim,
              "), got shape ", mask.sizes());
  return false;
}

FillBits fill_bits(const at::Scalar& fill_value, at::ScalarType dtype) {
  const at::Tensor one = at::scalar_tensor(fill_value, at::TensorOptions().dtype(dtype));
  FillBits bits;
  std::memcpy(bits.bytes, one.const_data_ptr(), one.element_size());
  return bits;
}

// The shape that broadcasts a 1-D tensor along `dim` of an n-D one.
std::vector<int64_t> along(int64_t ndim, int64_t dim, int64_t size) {
  std::vector<int64_t> shape(ndim, 1);
  shape[dim] = size;
  return shape;
}

// Slices of x along `dim` at `indices` (-1: a slot past the count, which gets fill_value).
at::Tensor gather_slices(const at::Tensor& x, int64_t dim, const at::Tensor& indices,
                         const at::Scalar& fill_value, bool may_have_tail) {
  auto shape = x.sizes().vec();
  shape[dim] = indices.size(0);
  if (indices.size(0) == 0) return at::empty(shape, x.options());
  if (x.size(dim) == 0) return at::full(shape, fill_value, x.options());
  if (!may_have_tail) return x.index_select(dim, indices);
  const at::Tensor taken = indices >= 0;
  const at::Tensor gathered = x.index_select(dim, indices.clamp_min(0));
  return at::where(taken.view(along(x.dim(), dim, indices.size(0))), gathered,
                   at::scalar_tensor(fill_value, x.options()));
}

at::Tensor no_indices(const at::Tensor& like) { return at::empty({0}, like.options().dtype(at::kLong)); }

}  // namespace

// The number of true entries of a bool tensor, read back to the host (the exact-size forms'
// sync): the device's compaction with no slots reads only the mask. (With `count_nonzero`,
// the count took 1.3 of the exact form's 2.2 ms at 2^28 elements on an H200.)
CountedMask count_true(const at::Tensor& mask_flat, CompactRunner run) {
  if (mask_flat.numel() == 0) return {};
  auto c = prepare_compact(at::Tensor(), mask_flat, 0, 0, /*want_indices=*/false);
  run(c);
  return {c.count.item<int64_t>(), c.plan};
}

bool compactable_element_size(int64_t bytes) {
  return bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8 || bytes == 16;
}

PreparedCompact prepare_compact(const at::Tensor& source, const at::Tensor& mask_flat, int64_t capacity,
                                const at::Scalar& fill_value, bool want_indices) {
  TORCH_INTERNAL_ASSERT(mask_flat.dim() == 1 && mask_flat.scalar_type() == at::kBool);
  PreparedCompact c;
  c.mask = mask_flat.contiguous();
  const auto index_options = c.mask.options().dtype(at::kLong);
  if (source.defined()) {
    TORCH_INTERNAL_ASSERT(source.dim() == 1 && source.size(0) == c.mask.size(0));
    TORCH_CHECK(compactable_element_size(source.element_size()), "x: elements of ",
                source.element_size(), " bytes (", dtype_name(source.scalar_type()), ") are not supported");
    c.source = source.contiguous();
    c.values = at::empty({capacity}, source.options());
    c.fill = fill_bits(fill_value, source.scalar_type());
  }
  if (want_indices) c.indices = at::empty({capacity}, index_options);
  c.launch = c.mask.numel() > 0;
  // A launched compaction always writes the count.
  c.count = c.launch ? at::empty({}, index_options) : at::zeros({}, index_options);
  auto& call = c.call;
  // One row, scanned exclusively: each position receives the number of kept positions before it.
  call.geometry = make_geometry(1, c.mask.numel(), at::Tensor(), /*exclusive=*/true, /*reverse=*/false);
  call.layout = ScanLayout{/*dense_rows=*/true, /*rows_adjacent=*/false};
  call.mask = c.mask.const_data_ptr<bool>();
  if (c.source.defined()) {
    call.source = c.source.const_data_ptr();
    call.values = c.values.data_ptr();
    call.element_bytes = c.source.element_size();
  }
  if (c.indices.defined()) call.indices = c.indices.data_ptr<int64_t>();
  call.count = c.count.data_ptr<int64_t>();
  call.capacity = capacity;
  return c;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> compact_capacity(const at::Tensor& x, const at::Tensor& mask,
                                                                int64_t capacity, int64_t dim,
                                                                const at::Scalar& fill_value,
                                                                bool return_indices, CompactRunner run) {
  check_mask(mask, x);
  check_capacity(capacity);
  if (selects_elements(x, mask, dim)) {
    auto c = prepare_compact(x.reshape({-1}), mask.reshape({-1}), capacity, fill_value, return_indices);
    run(c);
    return {c.values, c.count, return_indices ? c.indices : no_indices(x)};
  }
  // Slices: the positions of the kept slices, then a gather of whole slices.
  const int64_t d = wrap_dim(x, dim);
  auto c = prepare_compact(at::Tensor(), mask, capacity, fill_value, /*want_indices=*/true);
  run(c);
  at::Tensor values = gather_slices(x, d, c.indices, fill_value, /*may_have_tail=*/true);
  return {values, c.count, return_indices ? c.indices : no_indices(x)};
}

std::tuple<at::Tensor, at::Tensor> compact_exact(const at::Tensor& x, const at::Tensor& mask, int64_t dim,
                                                 bool return_indices, CompactRunner run) {
  check_mask(mask, x);
  const bool elements = selects_elements(x, mask, dim);
  const int64_t d = elements ? 0 : wrap_dim(x, dim);
  // Flattened once: a strided mask is copied once for both passes.
  const at::Tensor mask_flat = mask.reshape({-1}).contiguous();
  // The exact form syncs (as x[mask] does): the output's size is the count. The second call
  // reuses the first's plan of the mask and has no slots past the count to fill.
  const CountedMask counted = count_true(mask_flat, run);
  auto c = prepare_compact(elements ? x.reshape({-1}) : at::Tensor(), mask_flat, counted.count, 0,
                           return_indices || !elements);
  c.plan = counted.plan;
  c.fill_past_count = false;
  run(c);
  if (elements) return {c.values, return_indices ? c.indices : no_indices(x)};
  at::Tensor values = gather_slices(x, d, c.indices, 0, /*may_have_tail=*/false);
  return {values, return_indices ? c.indices : no_indices(x)};
}

at::Tensor compact_backward(const at::Tensor& grad_values, const at::Tensor& mask, int64_t dim) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "mask: expected a torch.bool tensor, got ",
              dtype_name(mask.scalar_type()));
  const bool elements = mask.dim() != 1;
  const int64_t d = elements ? 0 : wrap_dim(grad_values, dim);
  auto out_shape = elements ? mask.sizes().vec() : grad_values.sizes().vec();
  if (!elements) out_shape[d] = mask.size(0);
  const int64_t capacity = grad_values.size(d);
  const at::Tensor mask_flat = mask.reshape({-1});
  if (capacity == 0 || mask_flat.numel() == 0) return at::zeros(out_shape, grad_values.options());
  // Each position's slot: the number of kept positions before it (the library's scan).
  const at::Tensor slot = parprims::scan(mask_flat, 0, "add", /*exclusive=*/true);
  const at::Tensor kept = mask_flat.logical_and(slot < capacity);
  // Every position reads a valid slot; the ones not kept are zeroed by the `where`.
  const at::Tensor gathered = grad_values.index_select(d, slot.clamp_max(capacity - 1));
  const at::Tensor zero = at::zeros({}, grad_values.options());
  if (elements) return at::where(kept, gathered, zero).view(out_shape);
  return at::where(kept.view(along(grad_values.dim(), d, mask_flat.numel())), gathered, zero);
}

std::tuple<at::Tensor, at::Tensor> segmented_compact(const at::Tensor& x, const at::Tensor& mask,
                                                     const at::Tensor& offsets,
                                                     std::optional<int64_t> capacity,
                                                     const at::Scalar& fill_value, CompactRunner run) {
  TORCH_CHECK(x.dim() >= 1, "x: expected the packed data (total, ...), got a 0-d tensor");
  check_mask(mask, x);
  TORCH_CHECK(mask.dim() == 1 && mask.size(0) == x.size(0), "mask: expected shape [", x.size(0),
              "] (x's packed length), got shape ", mask.sizes());
  const int64_t total = x.size(0);
  check_offsets_arg(offsets, x, total, offsets.is_cpu() || checks_enabled());
  at::Tensor values;
  if (capacity.has_value()) {
    values = std::get<0>(compact_capacity(x, mask, *capacity, 0, fill_value, false, run));
  } else {
    values = std::get<0>(compact_exact(x, mask, 0, false, run));
  }
  // kept_before[p]: the number of kept positions before p, for p in [0, total]. A sequence's
  // boundary moves to the count of kept positions before it. Offsets are clamped into
  // [0, total] first, so that invalid ones never index out of bounds.
  const at::Tensor kept_before =
      at::cat({at::zeros({1}, offsets.options().dtype(at::kLong)), parprims::scan(mask, 0, "add")});
  at::Tensor new_offsets = kept_before.index_select(0, offsets.to(at::kLong).clamp(0, total));
  if (capacity.has_value()) new_offsets = new_offsets.clamp_max(*capacity);
  return {values, new_offsets.to(offsets.scalar_type())};
}

at::Tensor pad(const at::Tensor& x, const at::Tensor& indices, int64_t batch, int64_t seqlen) {
  TORCH_CHECK(batch >= 0 && seqlen >= 0, "batch, seqlen: expected non-negative sizes, got ", batch, " and ",
              seqlen);
  TORCH_CHECK(x.dim() >= 1, "x: expected the packed rows (tokens, ...), got a 0-d tensor");
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt,
              "indices: expected an int64 or int32 tensor, got ", dtype_name(indices.scalar_type()));
  TORCH_CHECK(indices.dim() == 1 && indices.size(0) == x.size(0), "indices: expected shape [", x.size(0),
              "] (one per row of x), got shape ", indices.sizes());
  TORCH_CHECK(indices.device() == x.device(), "indices: expected a tensor on ", x.device(),
              " (x's device), got ", indices.device());
  const int64_t cells = batch * seqlen;
  auto shape = x.sizes().vec();
  shape[0] = cells + 1;  // one spare row takes the rows whose index is out of range
  at::Tensor out = at::zeros(shape, x.options());
  const at::Tensor idx = indices.to(at::kLong);
  const at::Tensor target = at::where((idx >= 0).logical_and(idx < cells), idx, cells);
  out.index_copy_(0, target, x);
  shape.erase(shape.begin());
  shape.insert(shape.begin(), {batch, seqlen});
  return out.narrow(0, 0, cells).view(shape);
}

// ---- offsets helpers ----

namespace {

void check_index_dtype(at::ScalarType t, const char* name) {
  TORCH_CHECK(t == at::kInt || t == at::kLong, name, ": expected an int32 or int64 tensor, got ", dtype_name(t));
}

void check_offsets_shape(const at::Tensor& offsets) {
  check_index_dtype(offsets.scalar_type(), "offsets");
  TORCH_CHECK(offsets.dim() == 1 && offsets.numel() >= 1,
              "offsets: expected a 1-D tensor of length num_sequences + 1, got shape ", offsets.sizes());
}

void check_output_dtype(at::ScalarType t) {
  TORCH_CHECK(t == at::kInt || t == at::kLong, "dtype: expected torch.int32 or torch.int64, got ", dtype_name(t));
}

}  // namespace

at::Tensor offsets_from_lengths(const at::Tensor& lengths, std::optional<at::ScalarType> dtype) {
  check_index_dtype(lengths.scalar_type(), "lengths");
  TORCH_CHECK(lengths.dim() == 1, "lengths: expected a 1-D tensor of sequence lengths, got shape ",
              lengths.sizes());
  const at::ScalarType out_dtype = dtype.value_or(lengths.scalar_type());
  check_output_dtype(out_dtype);
  if (lengths.is_cpu() || checks_enabled()) {
    TORCH_CHECK(!(lengths < 0).any().item<bool>(), "lengths: expected non-negative lengths");
  }
  const int64_t sequences = lengths.size(0);
  at::Tensor out = at::zeros({sequences + 1}, lengths.options().dtype(out_dtype));
  if (sequences > 0) out.narrow(0, 1, sequences).copy_(parprims::scan(lengths, 0, "add"));
  return out;
}

at::Tensor lengths_from_offsets(const at::Tensor& offsets) {
  check_offsets_shape(offsets);
  if (offsets.is_cpu()) validate_offsets(offsets, offsets[-1].item<int64_t>());
  else if (checks_enabled()) validate_offsets(offsets, offsets[-1].item<int64_t>());
  const int64_t sequences = offsets.size(0) - 1;
  return offsets.narrow(0, 1, sequences) - offsets.narrow(0, 0, sequences);
}

at::Tensor offsets_from_flags(const at::Tensor& flags, std::optional<int64_t> capacity,
                              std::optional<at::ScalarType> dtype, CompactRunner run) {
  TORCH_CHECK(flags.scalar_type() == at::kBool, "flags: expected a torch.bool tensor, got ",
              dtype_name(flags.scalar_type()));
  TORCH_CHECK(flags.dim() == 1, "flags: expected a 1-D tensor, got shape ", flags.sizes());
  const at::ScalarType out_dtype = dtype.value_or(at::kLong);
  check_output_dtype(out_dtype);
  if (capacity.has_value()) check_capacity(*capacity);
  const int64_t total = flags.size(0);
  // Position 0 always starts a sequence, whether or not its flag is set.
  at::Tensor starts = flags.clone();
  if (total > 0) starts.narrow(0, 0, 1).fill_(true);
  // The exact form syncs: the number of sequences is the output's size.
  CountedMask counted;
  if (!capacity.has_value()) counted = count_true(starts, run);
  auto c = prepare_compact(at::Tensor(), starts, capacity.value_or(counted.count), 0, /*want_indices=*/true);
  c.plan = counted.plan;
  c.fill_past_count = capacity.has_value();
  run(c);
  // Slots past the number of sequences (-1) become `total`: trailing empty sequences.
  const at::Tensor bounded = at::where(c.indices >= 0, c.indices, total);
  return at::cat({bounded, at::full({1}, total, c.indices.options())}).to(out_dtype);
}

at::Tensor flags_from_offsets(const at::Tensor& offsets, int64_t total) {
  check_offsets_shape(offsets);
  TORCH_CHECK(total >= 0, "total: expected a non-negative length, got ", total);
  if (offsets.is_cpu() || checks_enabled()) validate_offsets(offsets, total);
  const int64_t sequences = offsets.size(0) - 1;
  // A spare last flag takes the starts that are out of range, so invalid offsets never write
  // out of bounds; the starts of empty sequences coincide with the next start.
  at::Tensor flags = at::zeros({total + 1}, offsets.options().dtype(at::kBool));
  const at::Tensor starts = offsets.narrow(0, 0, sequences).to(at::kLong);
  const at::Tensor target = at::where((starts >= 0).logical_and(starts < total), starts, total);
  flags.index_fill_(0, target, true);
  return flags.narrow(0, 0, total);
}

at::Tensor segment_ids_from_offsets(const at::Tensor& offsets, int64_t total) {
  check_offsets_shape(offsets);
  TORCH_CHECK(total >= 0, "total: expected a non-negative length, got ", total);
  if (offsets.is_cpu() || checks_enabled()) validate_offsets(offsets, total);
  const int64_t sequences = offsets.size(0) - 1;
  // The id of position p: how many sequence ends offsets[1..S] lie at or before p. A binary
  // search per position, which stays in bounds whatever the offsets hold.
  const at::Tensor ends = offsets.narrow(0, 1, sequences).contiguous();
  const at::Tensor positions = at::arange(total, offsets.options());
  return at::searchsorted(ends, positions, /*out_int32=*/true, /*right=*/true);
}

}  // namespace parprims::host
