// Typed dispatch of segment_reduce and reduce onto a scan engine (CPU or CUDA): from a prepared
// call (host/reduce_host.h) to the ReduceProblem of the input's dtype (core/reduce_problems.h).
// One function per operator, so that the CUDA ones compile in their own translation units
// (cuda/reduce_<op>.cu), each about the size of one scan operator's.
#pragma once

#include <ATen/core/Tensor.h>

#include "../core/reduce_problems.h"
#include "reduce_host.h"
#include "scan_dispatch.h"

namespace parprims::host {

// Fills `c.out` with the empty result (what a segment without elements gives), then reduces
// every non-empty (row, segment) into it with monoid M.
template <class M, class In, class Out, class Engine>
void run_reduce(const PreparedReduce& c, Engine& engine) {
  using Traits = ReduceTraits<M>;
  c.out.fill_(at::Scalar(Traits::empty_result()));
  // No outputs (no sequences) leaves nothing to do; on CUDA, unvalidated offsets may then
  // still claim elements, and the engine's segment search needs at least one segment.
  if (c.in.numel() == 0 || c.out.numel() == 0) return;
  ReduceProblem<M, In, Out> p;
  p.in = static_cast<const In*>(c.in.const_data_ptr());
  p.out = static_cast<Out*>(c.out.data_ptr());
  std::vector<at::Tensor> operands{c.in, c.out};
  if (c.mask.defined()) operands.push_back(c.mask);
  const auto idx = row_indexers(operands, c.dim);
  p.in_rows = idx[0];
  p.out_rows = idx[1];
  if (c.mask.defined()) {
    p.mask = c.mask.const_data_ptr<bool>();
    p.mask_rows = idx[2];
  }
  // The input's layout picks the kernel: the output is written once per segment, and a mask is
  // usually a broadcast of far fewer bytes (a padded batch's (B, L, 1) attention mask).
  engine(p, c.geometry, classify_layout(&idx[0], 1, c.geometry.len));
}

// In the accumulate type of T on the engine's device (float for half; double on the CPU for
// float, as torch.sum), writing T.
template <template <class> class M, class T, class Engine>
void run_reduce_accumulating(const PreparedReduce& c, Engine& engine) {
  run_reduce<M<accumulate_t<T, Engine>>, T, T>(c, engine);
}

// Integers and bool accumulate sum and prod in int64 (as torch.sum and torch.prod); floating
// types in the accumulate type of the engine's device.
template <template <class> class M, class Engine>
void run_reduce_widening(const PreparedReduce& c, Engine& engine) {
  switch (c.in.scalar_type()) {
    case at::kInt: return run_reduce<M<int64_t>, int32_t, int64_t>(c, engine);
    case at::kLong: return run_reduce<M<int64_t>, int64_t, int64_t>(c, engine);
    case at::kBool: return run_reduce<M<int64_t>, bool, int64_t>(c, engine);
    default:
      return visit_floating(c.in.scalar_type(), [&](auto tag) {
        run_reduce_accumulating<M, typename decltype(tag)::type>(c, engine);
      });
  }
}

template <class Engine>
void dispatch_reduce_sum(const PreparedReduce& c, Engine engine) {
  run_reduce_widening<Add>(c, engine);
}

template <class Engine>
void dispatch_reduce_prod(const PreparedReduce& c, Engine engine) {
  run_reduce_widening<Mul>(c, engine);
}

// mean: (sum, count) pairs divided at the end; floating types only.
template <class Engine>
void dispatch_reduce_mean(const PreparedReduce& c, Engine engine) {
  visit_floating(c.in.scalar_type(), [&](auto tag) {
    run_reduce_accumulating<SumCount, typename decltype(tag)::type>(c, engine);
  });
}

template <class Engine>
void dispatch_reduce_logsumexp(const PreparedReduce& c, Engine engine) {
  visit_floating(c.in.scalar_type(), [&](auto tag) {
    run_reduce_accumulating<LogAddExp, typename decltype(tag)::type>(c, engine);
  });
}

// max and min: exact in the compute type (float for half), keeping the dtype.
template <class Engine>
void dispatch_reduce_max(const PreparedReduce& c, Engine engine) {
  visit_floating_and_integral(c.in.scalar_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_reduce<Max<compute_t<T>>, T, T>(c, engine);
  });
}

template <class Engine>
void dispatch_reduce_min(const PreparedReduce& c, Engine engine) {
  visit_floating_and_integral(c.in.scalar_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_reduce<Min<compute_t<T>>, T, T>(c, engine);
  });
}

// One call for any op (the CPU's; CUDA calls the per-op units of reduce_instantiations.h).
template <class Engine>
void dispatch_reduce(const PreparedReduce& c, Engine engine) {
  switch (c.op) {
    case ReduceOp::kSum: return dispatch_reduce_sum(c, engine);
    case ReduceOp::kMean: return dispatch_reduce_mean(c, engine);
    case ReduceOp::kMax: return dispatch_reduce_max(c, engine);
    case ReduceOp::kMin: return dispatch_reduce_min(c, engine);
    case ReduceOp::kProd: return dispatch_reduce_prod(c, engine);
    case ReduceOp::kLogSumExp: return dispatch_reduce_logsumexp(c, engine);
  }
}

}  // namespace parprims::host
