// Host-side helpers shared by the CPU and CUDA wrappers: argument checks, the mapping from
// tensors to the plain structs the engines take, and the dtype dispatch of the scan operators.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "../core/scan_geometry.h"

namespace parprims::host {

// The scan operators by name, as the schemas take them.
enum class ScanOp { kAdd, kMul, kMax, kMin, kLogAddExp };
ScanOp parse_scan_op(const std::string& op);

// Normalizes `dim` for `x` (negative dims count from the end), with a clear error.
int64_t wrap_dim(const at::Tensor& x, int64_t dim, const char* arg = "dim");

// Row indexers for tensors of one shape (broadcast operands are expanded views), scanning
// along `dim`. Dimensions are collapsed where every operand allows it, so all indexers
// enumerate rows identically.
std::vector<RowIndexer> row_indexers(const std::vector<at::Tensor>& operands, int64_t dim);

// Checks `offsets` as an argument (dtype, shape, device) for data of length `len` along the
// scanned dimension; validates its values too when `validate_values` (always on CPU).
void check_offsets_arg(const at::Tensor& offsets, const at::Tensor& data, int64_t len,
                       bool validate_values);

// Validates offsets values: offsets[0] == 0, non-decreasing, offsets[-1] == total. Syncs.
void validate_offsets(const at::Tensor& offsets, int64_t total);

// Whether CUDA ops validate offsets on every call (set_checks / PARPRIMS_CHECKS=1).
bool checks_enabled();
void set_checks_enabled(bool on);

ScanGeometry make_geometry(int64_t rows, int64_t len, const c10::optional<at::Tensor>& offsets,
                           bool exclusive, bool reverse);

// The number of rows of a tensor scanned along `dim`.
int64_t row_count(const at::Tensor& x, int64_t dim);

// The dtype of a scan's output: int64 for add over integers and bool, the input's otherwise.
at::ScalarType scan_output_dtype(ScanOp op, at::ScalarType in);
void check_scan_dtype(ScanOp op, at::ScalarType in);

}  // namespace parprims::host
