// Typed dispatch of the scan family onto an engine (CPU or CUDA): from a kernel call
// (host/scan_call.h) to the problem struct of the input's dtype, handed to the engine. One
// function per operator, so that each CUDA operator compiles in its own translation unit.
// c10 only, no ATen: the CUDA kernel units compile it (cuda/launch_context.h).
//
// An Engine is a callable `engine(problem, geometry, layout)` with a `kIsCuda` constant.
#pragma once

#include <c10/core/ScalarType.h>
#include <c10/util/complex.h>

#include <type_traits>

#include "../core/extreme_grad_problem.h"
#include "../core/scan_problems.h"
#include "scan_call.h"

namespace parprims::host {

template <class T>
struct Tag {
  using type = T;
};

// The type a scan over `T` computes in: float for half types. Max and min are exact in it.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>,
                                     float, T>;

// The type the accumulating operators (add, mul, logaddexp, the affine recurrence) combine in:
// PyTorch's accumulate type for the engine's device (at::acc_type), as torch.cumsum uses. Half
// types: float. On the CPU, float and complex<float> widen to double: the CPU engine combines a
// row one element after another, so its rounding error grows with the row's length (the GPU
// engine's sequential steps are a thread's few items and one carry per tile). Spelled out here
// rather than taken from ATen/AccumulateType.h, which the CUDA units do not parse;
// cpu/scan_kernel.cpp checks that the two agree.
template <class T, bool kIsCuda>
struct Accumulate {
  using type = T;
};
template <bool kIsCuda>
struct Accumulate<c10::Half, kIsCuda> {
  using type = float;
};
template <bool kIsCuda>
struct Accumulate<c10::BFloat16, kIsCuda> {
  using type = float;
};
template <>
struct Accumulate<float, false> {
  using type = double;
};
template <>
struct Accumulate<c10::complex<float>, false> {
  using type = c10::complex<double>;
};

template <class T, class Engine>
using accumulate_t = typename Accumulate<T, Engine::kIsCuda>::type;

template <class F>
void visit_floating(c10::ScalarType t, F&& f) {
  switch (t) {
    case c10::kHalf: return f(Tag<c10::Half>{});
    case c10::kBFloat16: return f(Tag<c10::BFloat16>{});
    case c10::kFloat: return f(Tag<float>{});
    case c10::kDouble: return f(Tag<double>{});
    default: TORCH_CHECK(false, "unsupported dtype ", t);
  }
}

template <class F>
void visit_floating_and_complex(c10::ScalarType t, F&& f) {
  switch (t) {
    case c10::kComplexFloat: return f(Tag<c10::complex<float>>{});
    case c10::kComplexDouble: return f(Tag<c10::complex<double>>{});
    default: return visit_floating(t, f);
  }
}

template <class F>
void visit_floating_and_integral(c10::ScalarType t, F&& f) {
  switch (t) {
    case c10::kInt: return f(Tag<int32_t>{});
    case c10::kLong: return f(Tag<int64_t>{});
    case c10::kBool: return f(Tag<bool>{});
    default: return visit_floating(t, f);
  }
}


// Scans `c.in` into `c.out` (same shape; `out` has the scan's output dtype) with monoid M.
template <class M, class In, class Out, class Engine>
void run_scan(const ScanCall& c, Engine& engine) {
  ScanProblem<M, In, Out> p;
  p.in = static_cast<const In*>(c.in);
  p.out = static_cast<Out*>(c.out);
  p.in_rows = c.in_rows;
  p.out_rows = c.out_rows;
  engine(p, c.geometry, c.layout);
}

// The same with the monoid template applied to the compute type of T, writing T.
template <template <class> class M, class T, class Engine>
void run_scan_same(const ScanCall& c, Engine& engine) {
  run_scan<M<compute_t<T>>, T, T>(c, engine);
}

// The same in the accumulate type of T on the engine's device, writing T.
template <template <class> class M, class T, class Engine>
void run_scan_accumulating(const ScanCall& c, Engine& engine) {
  run_scan<M<accumulate_t<T, Engine>>, T, T>(c, engine);
}

template <class Engine>
void dispatch_scan_add(const ScanCall& c, Engine engine) {
  switch (c.dtype) {
    case c10::kComplexFloat: return run_scan_accumulating<Add, c10::complex<float>>(c, engine);
    case c10::kComplexDouble: return run_scan_accumulating<Add, c10::complex<double>>(c, engine);
    // Integers and bool accumulate in int64, as torch.cumsum does.
    case c10::kInt: return run_scan<Add<int64_t>, int32_t, int64_t>(c, engine);
    case c10::kLong: return run_scan<Add<int64_t>, int64_t, int64_t>(c, engine);
    case c10::kBool: return run_scan<Add<int64_t>, bool, int64_t>(c, engine);
    default:
      return visit_floating(c.dtype, [&](auto tag) {
        run_scan_accumulating<Add, typename decltype(tag)::type>(c, engine);
      });
  }
}

template <class Engine>
void dispatch_scan_mul(const ScanCall& c, Engine engine) {
  visit_floating(c.dtype, [&](auto tag) {
    run_scan_accumulating<Mul, typename decltype(tag)::type>(c, engine);
  });
}

// The GPU scans (max, rest) pairs (LogSumExp: one exp a combine, a log1p an output); the CPU,
// which walks a row element by element, LogAddExp in double for float32.
template <class Engine>
void dispatch_scan_logaddexp(const ScanCall& c, Engine engine) {
  visit_floating(c.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (Engine::kIsCuda) {
      run_scan<LogSumExp<accumulate_t<T, Engine>>, T, T>(c, engine);
    } else {
      run_scan_accumulating<LogAddExp, T>(c, engine);
    }
  });
}

template <class Engine>
void dispatch_scan_max(const ScanCall& c, Engine engine) {
  visit_floating_and_integral(c.dtype, [&](auto tag) {
    run_scan_same<Max, typename decltype(tag)::type>(c, engine);
  });
}

template <class Engine>
void dispatch_scan_min(const ScanCall& c, Engine engine) {
  visit_floating_and_integral(c.dtype, [&](auto tag) {
    run_scan_same<Min, typename decltype(tag)::type>(c, engine);
  });
}

// max/min with the position each output came from (what their backward scatters to).
template <class Engine>
void dispatch_scan_with_indices(const ScanWithIndicesCall& c, Engine engine) {
  visit_floating(c.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto fill = [&](auto& p) {
      p.in = static_cast<const T*>(c.in);
      p.out = static_cast<T*>(c.out);
      p.index = c.index;
      p.in_rows = c.in_rows;
      p.out_rows = c.out_rows;
      p.index_rows = c.index_rows;
      engine(p, c.geometry, c.layout);
    };
    if (c.is_max) {
      ScanWithIndicesProblem<ArgMax<compute_t<T>>, T> p;
      fill(p);
    } else {
      ScanWithIndicesProblem<ArgMin<compute_t<T>>, T> p;
      fill(p);
    }
  });
}

// The backward of max/min scans, as sums over the runs of equal outputs.
template <class Engine>
void dispatch_scan_extreme_grad(const ExtremeScanGradCall& c, Engine engine) {
  visit_floating(c.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto run = [&](auto p) {
      p.grad = static_cast<const T*>(c.grad);
      p.out = static_cast<const T*>(c.out);
      p.grad_in = static_cast<T*>(c.grad_in);
      p.starts = c.starts;
      p.len = c.len;
      p.exclusive = c.exclusive;
      p.forward_reverse = c.forward_reverse;
      p.grad_rows = c.grad_rows;
      p.out_rows = c.out_rows;
      p.grad_in_rows = c.grad_in_rows;
      engine(p, c.geometry, c.layout);
    };
    if (c.starts != nullptr) {
      run(ExtremeScanGradProblem<T, accumulate_t<T, Engine>, true>{});
    } else {
      run(ExtremeScanGradProblem<T, accumulate_t<T, Engine>, false>{});
    }
  });
}

template <class Engine>
void dispatch_scan_bicyclic(const BicyclicCall& c, Engine engine) {
  BicyclicProblem p;
  p.p_in = c.p_in;
  p.q_in = c.q_in;
  p.p_out = c.p_out;
  p.q_out = c.q_out;
  p.p_in_rows = c.p_in_rows;
  p.q_in_rows = c.q_in_rows;
  p.p_out_rows = c.p_out_rows;
  p.q_out_rows = c.q_out_rows;
  engine(p, c.geometry, c.layout);
}

}  // namespace parprims::host
