// Typed dispatch of the affine recurrences onto an engine (CPU or CUDA): from a kernel call
// (host/affine_call.h) to the problem struct of the input's dtype (and state size). No ATen,
// like host/scan_dispatch.h.
#pragma once

#include "../core/affine_problems.h"
#include "affine_call.h"
#include "scan_dispatch.h"

namespace parprims::host {

template <class In, class Engine>
void run_affine(const AffineCall& c, Engine& engine) {
  using State = compute_t<In>;  // the dtype of the state tensors
  using C = accumulate_t<In, Engine>;
  AffineProblem<In, C, State> p;
  p.a = static_cast<const In*>(c.a);
  p.b = static_cast<const In*>(c.b);
  p.h = static_cast<In*>(c.h);
  p.initial = static_cast<const State*>(c.initial);
  p.final_state = static_cast<State*>(c.final_state);
  p.rows = c.rows;
  p.log_gates = c.log_gates;
  p.a_rows = c.a_rows;
  p.b_rows = c.b_rows;
  p.h_rows = c.h_rows;
  engine(p, c.geometry, c.layout);
}

template <class Engine>
void dispatch_affine(const AffineCall& c, Engine engine) {
  visit_floating_and_complex(c.dtype, [&](auto tag) { run_affine<typename decltype(tag)::type>(c, engine); });
}

template <class In, class Engine>
void run_affine_grad(const AffineGradCall& c, Engine& engine) {
  using State = compute_t<In>;
  using C = accumulate_t<In, Engine>;
  AffineGradProblem<In, C, State> p;
  p.a = static_cast<const In*>(c.a);
  p.grad_h = static_cast<const In*>(c.grad_h);
  p.h = static_cast<const In*>(c.h);
  p.grad_a = static_cast<In*>(c.grad_a);
  p.grad_b = static_cast<In*>(c.grad_b);
  p.grad_final = static_cast<const State*>(c.grad_final);
  p.initial = static_cast<const State*>(c.initial);
  p.grad_initial = static_cast<State*>(c.grad_initial);
  p.rows = c.rows;
  p.len = c.len;
  p.log_gates = c.log_gates;
  p.forward_reverse = c.forward_reverse;
  p.a_rows = c.a_rows;
  p.grad_h_rows = c.grad_h_rows;
  p.h_rows = c.h_rows;
  p.grad_a_rows = c.grad_a_rows;
  p.grad_b_rows = c.grad_b_rows;
  engine(p, c.geometry, c.layout);
}

template <class Engine>
void dispatch_affine_grad(const AffineGradCall& c, Engine engine) {
  visit_floating_and_complex(c.dtype, [&](auto tag) { run_affine_grad<typename decltype(tag)::type>(c, engine); });
}

template <class T, int D, class Engine>
void run_matrix_affine(const MatrixAffineCall& c, Engine& engine) {
  MatrixAffineProblem<T, D, accumulate_t<T, Engine>> p;
  p.A = static_cast<const T*>(c.A);
  p.b = static_cast<const T*>(c.b);
  p.h = static_cast<T*>(c.h);
  p.initial = static_cast<const T*>(c.initial);
  p.final_state = static_cast<T*>(c.final_state);
  p.rows = c.rows;
  p.d = c.d;
  p.A_row_stride = c.A_row_stride;
  p.A_col_stride = c.A_col_stride;
  p.b_stride = c.b_stride;
  p.h_stride = c.h_stride;
  p.A_rows = c.A_rows;
  p.b_rows = c.b_rows;
  p.h_rows = c.h_rows;
  engine(p, c.geometry, c.layout);
}

// State sizes are padded to 2, 4 or 8 (zero padding keeps the result exact).
template <class T, class Engine>
void dispatch_matrix_affine_typed(const MatrixAffineCall& c, Engine& engine) {
  if (c.d <= 2) return run_matrix_affine<T, 2>(c, engine);
  if (c.d <= 4) return run_matrix_affine<T, 4>(c, engine);
  return run_matrix_affine<T, 8>(c, engine);
}

template <class Engine>
void dispatch_matrix_affine(const MatrixAffineCall& c, Engine engine) {
  if (c.dtype == c10::kDouble) return dispatch_matrix_affine_typed<double>(c, engine);
  return dispatch_matrix_affine_typed<float>(c, engine);
}

}  // namespace parprims::host
