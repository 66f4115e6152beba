// Typed dispatch of the affine recurrences onto an engine (CPU or CUDA): from a prepared call
// (host/affine_host.h) to the problem struct of the input's dtype (and state size).
#pragma once

#include "../core/affine_problems.h"
#include "affine_host.h"
#include "scan_dispatch.h"

namespace parprims::host {

template <class In, class Engine>
void run_affine(const PreparedAffine& args, Engine& engine) {
  using State = compute_t<In>;  // the dtype of the state tensors
  using C = accumulate_t<In, Engine>;
  AffineProblem<In, C, State> p;
  p.a = static_cast<const In*>(args.a.const_data_ptr());
  p.b = static_cast<const In*>(args.b.const_data_ptr());
  p.h = static_cast<In*>(args.h.data_ptr());
  p.initial = args.initial.defined() ? static_cast<const State*>(args.initial.const_data_ptr()) : nullptr;
  p.final_state = static_cast<State*>(args.final_state.data_ptr());
  p.rows = args.rows;
  p.log_gates = args.log_gates;
  const auto idx = row_indexers({args.a, args.b, args.h}, args.dim);
  p.a_rows = idx[0];
  p.b_rows = idx[1];
  p.h_rows = idx[2];
  launch(p, idx, args.geometry, engine);
}

template <class Engine>
void dispatch_affine(const PreparedAffine& args, Engine engine) {
  visit_floating_and_complex(args.b.scalar_type(),
                             [&](auto tag) { run_affine<typename decltype(tag)::type>(args, engine); });
}

template <class In, class Engine>
void run_affine_grad(const PreparedAffineGrad& args, Engine& engine) {
  using State = compute_t<In>;
  using C = accumulate_t<In, Engine>;
  AffineGradProblem<In, C, State> p;
  p.a = static_cast<const In*>(args.a.const_data_ptr());
  p.grad_h = static_cast<const In*>(args.grad_h.const_data_ptr());
  p.h = static_cast<const In*>(args.h.const_data_ptr());
  p.grad_a = static_cast<In*>(args.grad_a.data_ptr());
  p.grad_b = static_cast<In*>(args.grad_b.data_ptr());
  p.grad_final = args.grad_final.defined() ? static_cast<const State*>(args.grad_final.const_data_ptr()) : nullptr;
  p.initial = args.initial.defined() ? static_cast<const State*>(args.initial.const_data_ptr()) : nullptr;
  p.grad_initial = static_cast<State*>(args.grad_initial.data_ptr());
  p.rows = args.rows;
  p.len = args.h.size(args.dim);
  p.log_gates = args.log_gates;
  p.forward_reverse = args.reverse;
  const auto idx = row_indexers({args.a, args.grad_h, args.h, args.grad_a, args.grad_b}, args.dim);
  p.a_rows = idx[0];
  p.grad_h_rows = idx[1];
  p.h_rows = idx[2];
  p.grad_a_rows = idx[3];
  p.grad_b_rows = idx[4];
  launch(p, idx, args.geometry, engine);
}

template <class Engine>
void dispatch_affine_grad(const PreparedAffineGrad& args, Engine engine) {
  visit_floating_and_complex(args.h.scalar_type(),
                             [&](auto tag) { run_affine_grad<typename decltype(tag)::type>(args, engine); });
}

template <class T, int D, class Engine>
void run_matrix_affine(const PreparedMatrixAffine& args, Engine& engine) {
  MatrixAffineProblem<T, D, accumulate_t<T, Engine>> p;
  p.A = args.A.const_data_ptr<T>();
  p.b = args.b.const_data_ptr<T>();
  p.h = args.h.data_ptr<T>();
  p.initial = args.initial.defined() ? args.initial.const_data_ptr<T>() : nullptr;
  p.final_state = args.final_state.data_ptr<T>();
  p.rows = args.rows;
  p.d = static_cast<int>(args.d);
  p.A_row_stride = args.A.stride(-2);
  p.A_col_stride = args.A.stride(-1);
  p.b_stride = args.b.stride(-1);
  p.h_stride = args.h.stride(-1);
  // Rows and the scanned dimension come from the leading dims (state dims dropped).
  const auto A_lead = args.A.select(-1, 0).select(-1, 0);
  const auto b_lead = args.b.select(-1, 0);
  const auto h_lead = args.h.select(-1, 0);
  const auto idx = row_indexers({A_lead, b_lead, h_lead}, args.dim);
  p.A_rows = idx[0];
  p.b_rows = idx[1];
  p.h_rows = idx[2];
  launch(p, idx, args.geometry, engine);
}

// State sizes are padded to 2, 4 or 8 (zero padding keeps the result exact).
template <class T, class Engine>
void dispatch_matrix_affine_typed(const PreparedMatrixAffine& args, Engine& engine) {
  if (args.d <= 2) return run_matrix_affine<T, 2>(args, engine);
  if (args.d <= 4) return run_matrix_affine<T, 4>(args, engine);
  return run_matrix_affine<T, 8>(args, engine);
}

template <class Engine>
void dispatch_matrix_affine(const PreparedMatrixAffine& args, Engine engine) {
  if (args.b.scalar_type() == at::kDouble) return dispatch_matrix_affine_typed<double>(args, engine);
  return dispatch_matrix_affine_typed<float>(args, engine);
}

}  // namespace parprims::host
