// Host helpers shared by every op family: error-message formatting, dims, the mapping from
// tensors to row indexers and geometry, and the checks of packed-sequence offsets.
// Device-independent (ATen only, no kernels).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "../core/scan_geometry.h"
#include "engine_call.h"

namespace parprims::host {

// A dtype as PyTorch users spell it: "torch.float32", "torch.int64", "torch.complex64".
// Every error message names dtypes through this.
std::string dtype_name(at::ScalarType t);

// Normalizes `dim` for `x` (negative dims count from the end), with a clear error.
int64_t wrap_dim(const at::Tensor& x, int64_t dim, const char* arg = "dim");

// Row indexers for tensors of one shape (broadcast operands are expanded views), scanning
// along `dim`. Dimensions are collapsed where every operand allows it, so all indexers
// enumerate rows identically.
std::vector<RowIndexer> row_indexers(const std::vector<at::Tensor>& operands, int64_t dim);

// The number of rows of a tensor scanned along `dim`.
int64_t row_count(const at::Tensor& x, int64_t dim);

// Checks optional packed-sequence `offsets` for `data` of length `len` along the scanned
// dimension: dtype, shape and device always; the values when they are on the CPU (free) or
// when checks are enabled (a device-to-host copy on CUDA). Returns them contiguous (the
// engines index them densely; a prepared call keeps this tensor alive through the launch), or
// an undefined tensor without offsets.
// `name` is the argument's name in messages ("offsets", or "cu_seqlens").
at::Tensor checked_offsets(const c10::optional<at::Tensor>& offsets, const at::Tensor& data, int64_t len,
                           const char* name = "offsets");

// Checks `offsets` as an argument (dtype, shape, device) for data of length `len` along the
// scanned dimension; validates its values too when `validate_values`.
void check_offsets_arg(const at::Tensor& offsets, const at::Tensor& data, int64_t len,
                       bool validate_values, const char* name = "offsets");

// Validates offsets values: offsets[0] == 0, non-decreasing, offsets[-1] == total; the
// message names the first offending entry. Reads CUDA offsets back to the host (a sync).
void validate_offsets(const at::Tensor& offsets, int64_t total, const char* name = "offsets");

// Whether CUDA ops validate offsets on every call (set_checks / PARPRIMS_CHECKS=1).
bool checks_enabled();
void set_checks_enabled(bool on);

// `offsets`: contiguous (from checked_offsets), or undefined for one segment per row.
ScanGeometry make_geometry(int64_t rows, int64_t len, const at::Tensor& offsets, bool exclusive,
                           bool reverse);

// Checks `out`, a caller's buffer that an op's `_into` form writes (instead of allocating its
// output like `like`): `like`'s shape, dtype and device, no element twice, and no memory shared
// with `inputs` (the kernels read those while they write `out`).
void check_output(const at::Tensor& out, const at::Tensor& like, const char* name,
                  const std::vector<at::Tensor>& inputs);

// Sets `call`'s geometry, its dtype (the first operand's) and the layout of `operands` (one
// shape) scanned along `dim`; returns their row indexers, in order.
std::vector<RowIndexer> set_engine_call(EngineCall& call, const std::vector<at::Tensor>& operands, int64_t dim,
                                        const ScanGeometry& geometry);

}  // namespace parprims::host
