// The scan ops' host logic, shared by CPU and CUDA: argument checks, output allocation and
// geometry. A backend supplies one entry point per operator (its engine behind it).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <tuple>

#include "../core/scan_geometry.h"

namespace parprims::host {

using ScanFn = void (*)(const at::Tensor& in, const at::Tensor& out, int64_t dim,
                        const ScanGeometry& g);
using ArgScanFn = void (*)(bool is_max, const at::Tensor& in, const at::Tensor& out,
                           const at::Tensor& index, int64_t dim, const ScanGeometry& g);
using BicyclicFn = void (*)(const at::Tensor& p_in, const at::Tensor& q_in,
                            const at::Tensor& p_out, const at::Tensor& q_out, int64_t dim,
                            const ScanGeometry& g);

struct ScanBackend {
  ScanFn add, mul, max, min, logaddexp;
  ArgScanFn arg;
  BicyclicFn bicyclic;
  // CPU validates offsets on every call; CUDA only when checks are on (it would sync).
  bool always_validate_offsets;
};

at::Tensor scan(const ScanBackend& be, const at::Tensor& x, const c10::optional<at::Tensor>& offsets,
                int64_t dim, const std::string& op, bool exclusive, bool reverse);

std::tuple<at::Tensor, at::Tensor> scan_with_indices(const ScanBackend& be, const at::Tensor& x,
                                                     const c10::optional<at::Tensor>& offsets,
                                                     int64_t dim, const std::string& op,
                                                     bool exclusive, bool reverse);

std::tuple<at::Tensor, at::Tensor> scan_bicyclic(const ScanBackend& be, const at::Tensor& p,
                                                 const at::Tensor& q,
                                                 const c10::optional<at::Tensor>& offsets,
                                                 int64_t dim, bool exclusive, bool reverse);

// Checks offsets for data of length `len` (values too when the backend or the checks ask).
void check_offsets_for(bool always_validate, const c10::optional<at::Tensor>& offsets,
                       const at::Tensor& data, int64_t len);

}  // namespace parprims::host
