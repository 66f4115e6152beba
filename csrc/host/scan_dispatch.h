// Typed dispatch of the scan family onto an engine (CPU or CUDA): from a prepared call
// (host/scan_host.h) to the problem struct of the input's dtype, handed to the engine. One
// function per operator, so that each CUDA operator compiles in its own translation unit.
//
// An Engine is a callable `engine(problem, geometry, layout)` with a `kIsCuda` constant.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/AccumulateType.h>
#include <c10/util/complex.h>

#include <type_traits>

#include "../core/scan_problems.h"
#include "common.h"
#include "scan_host.h"

namespace parprims::host {

template <class T>
struct Tag {
  using type = T;
};

// The type a scan over `T` computes in: float for half types. Max and min are exact in it.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, at::Half> || std::is_same_v<T, at::BFloat16>,
                                     float, T>;

// The type the accumulating operators (add, mul, logaddexp, the affine recurrence) combine in:
// PyTorch's accumulate type for the engine's device, as torch.cumsum uses. Half types: float.
// On the CPU, float and complex<float> widen to double: the CPU engine combines a row one
// element after another, so its rounding error grows with the row's length (the GPU engine's
// sequential steps are a thread's few items and one carry per tile).
template <class T, class Engine>
using accumulate_t = at::acc_type<T, Engine::kIsCuda>;

template <class F>
void visit_floating(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kHalf: return f(Tag<at::Half>{});
    case at::kBFloat16: return f(Tag<at::BFloat16>{});
    case at::kFloat: return f(Tag<float>{});
    case at::kDouble: return f(Tag<double>{});
    default: TORCH_CHECK(false, "unsupported dtype ", dtype_name(t));
  }
}

template <class F>
void visit_floating_and_complex(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kComplexFloat: return f(Tag<c10::complex<float>>{});
    case at::kComplexDouble: return f(Tag<c10::complex<double>>{});
    default: return visit_floating(t, f);
  }
}

template <class F>
void visit_floating_and_integral(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kInt: return f(Tag<int32_t>{});
    case at::kLong: return f(Tag<int64_t>{});
    case at::kBool: return f(Tag<bool>{});
    default: return visit_floating(t, f);
  }
}


template <class P, class Engine>
void launch(const P& problem, const std::vector<RowIndexer>& indexers, const ScanGeometry& g,
            Engine& engine) {
  engine(problem, g, classify_layout(indexers.data(), static_cast<int>(indexers.size()), g.len));
}

// Scans `c.in` into `c.out` (same shape; `out` has the scan's output dtype) with monoid M.
template <class M, class In, class Out, class Engine>
void run_scan(const PreparedScan& c, Engine& engine) {
  ScanProblem<M, In, Out> p;
  p.in = static_cast<const In*>(c.in.const_data_ptr());
  p.out = static_cast<Out*>(c.out.data_ptr());
  const auto idx = row_indexers({c.in, c.out}, c.dim);
  p.in_rows = idx[0];
  p.out_rows = idx[1];
  launch(p, idx, c.geometry, engine);
}

// The same with the monoid template applied to the compute type of T, writing T.
template <template <class> class M, class T, class Engine>
void run_scan_same(const PreparedScan& c, Engine& engine) {
  run_scan<M<compute_t<T>>, T, T>(c, engine);
}

// The same in the accumulate type of T on the engine's device, writing T.
template <template <class> class M, class T, class Engine>
void run_scan_accumulating(const PreparedScan& c, Engine& engine) {
  run_scan<M<accumulate_t<T, Engine>>, T, T>(c, engine);
}

template <class Engine>
void dispatch_scan_add(const PreparedScan& c, Engine engine) {
  switch (c.in.scalar_type()) {
    case at::kComplexFloat: return run_scan_accumulating<Add, c10::complex<float>>(c, engine);
    case at::kComplexDouble: return run_scan_accumulating<Add, c10::complex<double>>(c, engine);
    // Integers and bool accumulate in int64, as torch.cumsum does.
    case at::kInt: return run_scan<Add<int64_t>, int32_t, int64_t>(c, engine);
    case at::kLong: return run_scan<Add<int64_t>, int64_t, int64_t>(c, engine);
    case at::kBool: return run_scan<Add<int64_t>, bool, int64_t>(c, engine);
    default:
      return visit_floating(c.in.scalar_type(), [&](auto tag) {
        run_scan_accumulating<Add, typename decltype(tag)::type>(c, engine);
      });
  }
}

template <class Engine>
void dispatch_scan_mul(const PreparedScan& c, Engine engine) {
  visit_floating(c.in.scalar_type(), [&](auto tag) {
    run_scan_accumulating<Mul, typename decltype(tag)::type>(c, engine);
  });
}

template <class Engine>
void dispatch_scan_logaddexp(const PreparedScan& c, Engine engine) {
  visit_floating(c.in.scalar_type(), [&](auto tag) {
    run_scan_accumulating<LogAddExp, typename decltype(tag)::type>(c, engine);
  });
}

template <class Engine>
void dispatch_scan_max(const PreparedScan& c, Engine engine) {
  visit_floating_and_integral(c.in.scalar_type(), [&](auto tag) {
    run_scan_same<Max, typename decltype(tag)::type>(c, engine);
  });
}

template <class Engine>
void dispatch_scan_min(const PreparedScan& c, Engine engine) {
  visit_floating_and_integral(c.in.scalar_type(), [&](auto tag) {
    run_scan_same<Min, typename decltype(tag)::type>(c, engine);
  });
}

// max/min with the position each output came from (what their backward scatters to).
template <class Engine>
void dispatch_scan_with_indices(const PreparedScanWithIndices& c, Engine engine) {
  visit_floating(c.in.scalar_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto idx = row_indexers({c.in, c.out, c.index}, c.dim);
    auto fill = [&](auto& p) {
      p.in = static_cast<const T*>(c.in.const_data_ptr());
      p.out = static_cast<T*>(c.out.data_ptr());
      p.index = c.index.data_ptr<int64_t>();
      p.in_rows = idx[0];
      p.out_rows = idx[1];
      p.index_rows = idx[2];
      launch(p, idx, c.geometry, engine);
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

template <class Engine>
void dispatch_scan_bicyclic(const PreparedBicyclic& c, Engine engine) {
  BicyclicProblem p;
  p.p_in = c.p_in.const_data_ptr<int64_t>();
  p.q_in = c.q_in.const_data_ptr<int64_t>();
  p.p_out = c.p_out.data_ptr<int64_t>();
  p.q_out = c.q_out.data_ptr<int64_t>();
  const auto idx = row_indexers({c.p_in, c.q_in, c.p_out, c.q_out}, c.dim);
  p.p_in_rows = idx[0];
  p.q_in_rows = idx[1];
  p.p_out_rows = idx[2];
  p.q_out_rows = idx[3];
  launch(p, idx, c.geometry, engine);
}

}  // namespace parprims::host
