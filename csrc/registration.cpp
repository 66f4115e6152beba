// The one TORCH_LIBRARY block: every schema of the library. Each op's kernels are in
// csrc/cpu/<family>_kernel.cpp and csrc/cuda/<family>_kernel.cpp (scan_kernel, affine_kernel, selective_scan_kernel, ...),
// registered there by name. Dims are counted over the whole tensor, negative from the end.
#include <torch/library.h>

#include "core/selective_scan.h"
#include "host/common.h"

TORCH_LIBRARY(parprims, m) {
  // ---- scans ----
  m.def("scan(Tensor x, int dim, str op=\"add\", bool exclusive=False, bool reverse=False) -> Tensor");
  m.def("segmented_scan(Tensor x, Tensor offsets, int dim=0, str op=\"add\", bool exclusive=False, "
        "bool reverse=False) -> Tensor");
  // max/min scans with the positions of the selected elements (their backward scatters there).
  m.def("_scan_with_indices(Tensor x, Tensor? offsets, int dim, str op, bool exclusive=False, "
        "bool reverse=False) -> (Tensor, Tensor)");
  // The gradient of a max/min scan (or segmented scan), from the forward's output `out` and its
  // gradient: each output's gradient summed at the position it came from.
  m.def("_scan_extreme_backward(Tensor grad, Tensor out, Tensor? offsets, int dim, bool exclusive, "
        "bool reverse) -> Tensor");
  // The exact non-commutative bicyclic monoid, to test operand order through every path.
  m.def("_scan_bicyclic(Tensor p, Tensor q, Tensor? offsets, int dim, bool exclusive=False, "
        "bool reverse=False) -> (Tensor, Tensor)");

  // ---- affine recurrences ----
  m.def("affine_scan(Tensor a, Tensor b, int dim=-1, Tensor? initial_state=None, "
        "Tensor? offsets=None, bool reverse=False, bool log_gates=False) -> (Tensor, Tensor)");
  // The same with exclusive outputs (h_{t-1}): what the backward of affine and mul scans use.
  m.def("_affine_scan_exclusive(Tensor a, Tensor b, int dim, Tensor? initial_state, "
        "Tensor? offsets, bool reverse, bool log_gates) -> (Tensor, Tensor)");
  // affine_scan's backward in one scan (rows without packed sequences), from the forward's
  // output h: (grad_a in h's shape, grad_b, grad_initial_state).
  m.def("_affine_scan_backward(Tensor a, Tensor h, Tensor grad_h, Tensor? grad_final, "
        "Tensor? initial_state, int dim, bool reverse, bool log_gates) -> (Tensor, Tensor, Tensor)");
  // The same two writing into the caller's tensors (views of larger ones: the sequence-parallel
  // pipeline's channel groups), returning final_state and grad_initial_state.
  m.def("_affine_scan_into(Tensor a, Tensor b, int dim, Tensor? initial_state, Tensor? offsets, bool reverse, "
        "bool log_gates, Tensor(a!) h) -> Tensor");
  m.def("_affine_scan_backward_into(Tensor a, Tensor h, Tensor grad_h, Tensor? grad_final, Tensor? initial_state, "
        "int dim, bool reverse, bool log_gates, Tensor(a!) grad_a, Tensor(b!) grad_b) -> Tensor");
  // `dim` indexes b including its last (state) dimension, which it may not name: the default
  // -2 is the L of b (..., L, d).
  m.def("matrix_affine_scan(Tensor A, Tensor b, int dim=-2, Tensor? initial_state=None, "
        "Tensor? offsets=None, bool reverse=False) -> (Tensor, Tensor)");
  m.def("_matrix_affine_scan_exclusive(Tensor A, Tensor b, int dim, Tensor? initial_state, "
        "Tensor? offsets, bool reverse) -> (Tensor, Tensor)");

  // ---- selective scan (Mamba-1) ----
  m.def("selective_scan(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D=None, Tensor? z=None, "
        "Tensor? delta_bias=None, bool delta_softplus=False, Tensor? initial_state=None, "
        "Tensor? cu_seqlens=None) -> (Tensor, Tensor)");
  // The forward with the states the backward restarts from (checkpoints; empty unless asked).
  // private_checkpoints: the caller never reads the checkpoints output, so that the first
  // eager backward may overwrite it (selective_scan passes true; ops/selective_scan.py).
  m.def("_selective_scan_forward(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
        "Tensor? delta_bias, bool delta_softplus, Tensor? initial_state, Tensor? cu_seqlens, "
        "bool save_checkpoints, bool private_checkpoints=False) -> (Tensor, Tensor, Tensor)");
  // Gradients (du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, dinitial_state); absent inputs get
  // empty tensors.
  m.def("_selective_scan_backward(Tensor grad_out, Tensor? grad_last_state, Tensor u, Tensor delta, Tensor A, "
        "Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? delta_bias, bool delta_softplus, "
        "Tensor? initial_state, Tensor? cu_seqlens, Tensor checkpoints) -> (Tensor, Tensor, Tensor, Tensor, "
        "Tensor, Tensor, Tensor, Tensor, Tensor)");
  // The same, free to overwrite the checkpoints once it has read them (the CUDA backward writes
  // its partial sums of variable dB and dC there, in place of an array of their own).
  m.def("_selective_scan_backward_consuming(Tensor grad_out, Tensor? grad_last_state, Tensor u, Tensor delta, "
        "Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? delta_bias, bool delta_softplus, "
        "Tensor? initial_state, Tensor? cu_seqlens, Tensor(a!) checkpoints) -> (Tensor, Tensor, Tensor, Tensor, "
        "Tensor, Tensor, Tensor, Tensor, Tensor)");
  m.def("_selective_scan_checkpoint_every() -> int");
  // One decode step, updating `state` in place; returns out.
  m.def("selective_state_update(Tensor(a!) state, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, "
        "Tensor? D=None, Tensor? z=None, Tensor? dt_bias=None, bool dt_softplus=False) -> Tensor");

  // ---- compaction (predicate -> exclusive scan -> scatter, on the scan engines) ----
  // Exact size: reads the count back (like x[mask]); indices is empty unless return_indices.
  m.def("compact(Tensor x, Tensor mask, int dim=0, bool return_indices=False) -> (Tensor, Tensor)");
  // Fixed capacity, no host synchronization: (values, count, indices), count a 0-d int64 tensor.
  m.def("compact_capacity(Tensor x, Tensor mask, int capacity, int dim=0, Scalar fill_value=0, "
        "bool return_indices=False) -> (Tensor, Tensor, Tensor)");
  // The gradient of both with respect to x: grad_values back at the kept positions.
  m.def("_compact_backward(Tensor grad_values, Tensor mask, int dim) -> Tensor");
  m.def("segmented_compact(Tensor x, Tensor mask, Tensor offsets, int? capacity=None, Scalar fill_value=0) "
        "-> (Tensor, Tensor)");
  m.def("pad(Tensor x, Tensor indices, int batch, int seqlen) -> Tensor");

  // ---- reductions and histograms (the scan engines' aggregates) ----
  // op: sum, mean, max, min, prod, logsumexp. An empty sequence (or slice) gives the identity
  // (mean: 0).
  m.def("segment_reduce(Tensor x, Tensor offsets, str op, int dim=0) -> Tensor");
  m.def("reduce(Tensor x, int dim, str op, Tensor? mask=None, bool keepdim=False) -> Tensor");
  // Equal-width bins over [lo, hi]: int64 counts, or weight sums; (S, bins) with offsets.
  m.def("histogram(Tensor x, int bins, float lo, float hi, Tensor? weights=None, Tensor? offsets=None) -> Tensor");
  // Where each value of x lands in histogram's (S, bins) output, flat (-1: skipped); the
  // gradient with respect to weights gathers through it.
  m.def("_histogram_bin_index(Tensor x, int bins, float lo, float hi, Tensor? offsets=None) -> Tensor");

  // ---- packed-sequence utilities ----
  m.def("offsets_from_lengths(Tensor lengths, ScalarType? dtype=None) -> Tensor");
  m.def("lengths_from_offsets(Tensor offsets) -> Tensor");
  m.def("offsets_from_flags(Tensor flags, int? capacity=None, ScalarType? dtype=None) -> Tensor");
  m.def("flags_from_offsets(Tensor offsets, int total) -> Tensor");
  m.def("segment_ids_from_offsets(Tensor offsets, int total) -> Tensor");
  m.def("check_offsets(Tensor offsets, SymInt total) -> ()");
  m.def("_set_checks(bool enabled) -> ()");
  m.def("_checks_enabled() -> bool");
}

TORCH_LIBRARY_IMPL(parprims, CompositeExplicitAutograd, m) {
  m.impl("check_offsets", [](const at::Tensor& offsets, c10::SymInt total) {
    parprims::host::check_offsets_arg(offsets, offsets, total.expect_int(), true);
  });
}

TORCH_LIBRARY_IMPL(parprims, CatchAll, m) {
  m.impl("_set_checks", [](bool enabled) { parprims::host::set_checks_enabled(enabled); });
  m.impl("_checks_enabled", []() { return parprims::host::checks_enabled(); });
  m.impl("_selective_scan_checkpoint_every", []() -> int64_t { return parprims::kSelectiveScanCheckpointEvery; });
}
