// Typed dispatch of the scan operators onto an engine (CPU or CUDA), one function per
// operator so that each CUDA operator compiles in its own translation unit.
//
// An Engine is a callable `engine(problem, geometry, layout)`.
#pragma once

#include <ATen/ATen.h>
#include <ATen/AccumulateType.h>
#include <c10/util/complex.h>

#include <type_traits>

#include "../core/scan_problems.h"
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
    default: TORCH_CHECK(false, "unsupported dtype ", t);
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

// Scans `in` into `out` (same shape; `out` has the scan's output dtype) with monoid M.
template <class M, class In, class Out, class Engine>
void run_scan(const at::Tensor& in, const at::Tensor& out, int64_t dim, const ScanGeometry& g,
              Engine& engine) {
  ScanProblem<M, In, Out> p;
  p.in = static_cast<const In*>(in.const_data_ptr());
  p.out = static_cast<Out*>(out.data_ptr());
  const auto idx = row_indexers({in, out}, dim);
  p.in_rows = idx[0];
  p.out_rows = idx[1];
  launch(p, idx, g, engine);
}

// The same with the monoid template applied to the compute type of T, writing T.
template <template <class> class M, class T, class Engine>
void run_scan_same(const at::Tensor& in, const at::Tensor& out, int64_t dim,
                   const ScanGeometry& g, Engine& engine) {
  run_scan<M<compute_t<T>>, T, T>(in, out, dim, g, engine);
}

// The same in the accumulate type of T on the engine's device, writing T.
template <template <class> class M, class T, class Engine>
void run_scan_accumulating(const at::Tensor& in, const at::Tensor& out, int64_t dim,
                           const ScanGeometry& g, Engine& engine) {
  run_scan<M<accumulate_t<T, Engine>>, T, T>(in, out, dim, g, engine);
}

template <class Engine>
void dispatch_scan_add(const at::Tensor& in, const at::Tensor& out, int64_t dim,
                       const ScanGeometry& g, Engine engine) {
  switch (in.scalar_type()) {
    case at::kComplexFloat: return run_scan_accumulating<Add, c10::complex<float>>(in, out, dim, g, engine);
    case at::kComplexDouble: return run_scan_accumulating<Add, c10::complex<double>>(in, out, dim, g, engine);
    // Integers and bool accumulate in int64, as torch.cumsum does.
    case at::kInt: return run_scan<Add<int64_t>, int32_t, int64_t>(in, out, dim, g, engine);
    case at::kLong: return run_scan<Add<int64_t>, int64_t, int64_t>(in, out, dim, g, engine);
    case at::kBool: return run_scan<Add<int64_t>, bool, int64_t>(in, out, dim, g, engine);
    default:
      return visit_floating(in.scalar_type(), [&](auto tag) {
        run_scan_accumulating<Add, typename decltype(tag)::type>(in, out, dim, g, engine);
      });
  }
}

template <class Engine>
void dispatch_scan_mul(const at::Tensor& in, const at::Tensor& out, int64_t dim,
                       const ScanGeometry& g, Engine engine) {
  visit_floating(in.scalar_type(), [&](auto tag) {
    run_scan_accumulating<Mul, typename decltype(tag)::type>(in, out, dim, g, engine);
  });
}

template <class Engine>
void dispatch_scan_logaddexp(const at::Tensor& in, const at::Tensor& out, int64_t dim,
                             const ScanGeometry& g, Engine engine) {
  visit_floating(in.scalar_type(), [&](auto tag) {
    run_scan_accumulating<LogAddExp, typename decltype(tag)::type>(in, out, dim, g, engine);
  });
}

template <class Engine>
void dispatch_scan_max(const at::Tensor& in, const at::Tensor& out, int64_t dim,
                       const ScanGeometry& g, Engine engine) {
  visit_floating_and_integral(in.scalar_type(), [&](auto tag) {
    run_scan_same<Max, typename decltype(tag)::type>(in, out, dim, g, engine);
  });
}

template <class Engine>
void dispatch_scan_min(const at::Tensor& in, const at::Tensor& out, int64_t dim,
                       const ScanGeometry& g, Engine engine) {
  visit_floating_and_integral(in.scalar_type(), [&](auto tag) {
    run_scan_same<Min, typename decltype(tag)::type>(in, out, dim, g, engine);
  });
}

// max/min with the position each output came from (what their backward scatters to).
template <class Engine>
void dispatch_scan_arg(bool is_max, const at::Tensor& in, const at::Tensor& out,
                       const at::Tensor& index, int64_t dim, const ScanGeometry& g, Engine engine) {
  visit_floating(in.scalar_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto idx = row_indexers({in, out, index}, dim);
    auto fill = [&](auto& p) {
      p.in = static_cast<const T*>(in.const_data_ptr());
      p.out = static_cast<T*>(out.data_ptr());
      p.index = index.data_ptr<int64_t>();
      p.in_rows = idx[0];
      p.out_rows = idx[1];
      p.index_rows = idx[2];
      launch(p, idx, g, engine);
    };
    if (is_max) {
      ArgScanProblem<ArgMax<compute_t<T>>, T> p;
      fill(p);
    } else {
      ArgScanProblem<ArgMin<compute_t<T>>, T> p;
      fill(p);
    }
  });
}

template <class Engine>
void dispatch_scan_bicyclic(const at::Tensor& p_in, const at::Tensor& q_in, const at::Tensor& p_out,
                            const at::Tensor& q_out, int64_t dim, const ScanGeometry& g,
                            Engine engine) {
  BicyclicProblem p;
  p.p_in = p_in.const_data_ptr<int64_t>();
  p.q_in = q_in.const_data_ptr<int64_t>();
  p.p_out = p_out.data_ptr<int64_t>();
  p.q_out = q_out.data_ptr<int64_t>();
  const auto idx = row_indexers({p_in, q_in, p_out, q_out}, dim);
  p.p_in_rows = idx[0];
  p.q_in_rows = idx[1];
  p.p_out_rows = idx[2];
  p.q_out_rows = idx[3];
  launch(p, idx, g, engine);
}

}  // namespace parprims::host
