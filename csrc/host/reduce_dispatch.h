// Typed dispatch of segment_reduce and reduce onto a scan engine (CPU or CUDA): from a kernel
// call (host/reduce_call.h) to the ReduceProblem of the input's dtype (core/reduce_problems.h).
// One function per operator, so that the CUDA ones compile in their own translation units
// (cuda/reduce_<op>.cu), each about the size of one scan operator's. No ATen, like
// host/scan_dispatch.h.
#pragma once

#include "../core/reduce_problems.h"
#include "reduce_call.h"
#include "scan_dispatch.h"

namespace parprims::host {

// Reduces every non-empty (row, segment) into `c.out` with monoid M. The engine is handed the
// problem; host/reduce_host.cpp also hands it to an engine that only reads its empty result.
template <class M, class In, class Out, class Engine>
void run_reduce(const ReduceCall& c, Engine& engine) {
  ReduceProblem<M, In, Out> p;
  p.in = static_cast<const In*>(c.in);
  p.out = static_cast<Out*>(c.out);
  p.in_rows = c.in_rows;
  p.out_rows = c.out_rows;
  p.mask = c.mask;
  p.mask_rows = c.mask_rows;
  engine(p, c.geometry, c.layout);
}

// In the accumulate type of T on the engine's device (float for half; double on the CPU for
// float, as torch.sum), writing T.
template <template <class> class M, class T, class Engine>
void run_reduce_accumulating(const ReduceCall& c, Engine& engine) {
  run_reduce<M<accumulate_t<T, Engine>>, T, T>(c, engine);
}

// Integers and bool accumulate sum and prod in int64 (as torch.sum and torch.prod); floating
// types in the accumulate type of the engine's device.
template <template <class> class M, class Engine>
void run_reduce_widening(const ReduceCall& c, Engine& engine) {
  switch (c.dtype) {
    case c10::kInt: return run_reduce<M<int64_t>, int32_t, int64_t>(c, engine);
    case c10::kLong: return run_reduce<M<int64_t>, int64_t, int64_t>(c, engine);
    case c10::kBool: return run_reduce<M<int64_t>, bool, int64_t>(c, engine);
    default:
      return visit_floating(c.dtype, [&](auto tag) {
        run_reduce_accumulating<M, typename decltype(tag)::type>(c, engine);
      });
  }
}

template <class Engine>
void dispatch_reduce_sum(const ReduceCall& c, Engine engine) {
  run_reduce_widening<Add>(c, engine);
}

template <class Engine>
void dispatch_reduce_prod(const ReduceCall& c, Engine engine) {
  run_reduce_widening<Mul>(c, engine);
}

// mean: (sum, count) pairs divided at the end; floating types only.
template <class Engine>
void dispatch_reduce_mean(const ReduceCall& c, Engine engine) {
  visit_floating(c.dtype, [&](auto tag) {
    run_reduce_accumulating<SumCount, typename decltype(tag)::type>(c, engine);
  });
}

template <class Engine>
void dispatch_reduce_logsumexp(const ReduceCall& c, Engine engine) {
  visit_floating(c.dtype, [&](auto tag) {
    run_reduce_accumulating<LogAddExp, typename decltype(tag)::type>(c, engine);
  });
}

// max and min: exact in the compute type (float for half), keeping the dtype.
template <class Engine>
void dispatch_reduce_max(const ReduceCall& c, Engine engine) {
  visit_floating_and_integral(c.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_reduce<Max<compute_t<T>>, T, T>(c, engine);
  });
}

template <class Engine>
void dispatch_reduce_min(const ReduceCall& c, Engine engine) {
  visit_floating_and_integral(c.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run_reduce<Min<compute_t<T>>, T, T>(c, engine);
  });
}

// One call for any op (the CPU's; CUDA calls the per-op units of reduce_instantiations.h).
template <class Engine>
void dispatch_reduce(const ReduceCall& c, Engine engine) {
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
