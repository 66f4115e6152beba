// A thread's run of positions loaded ahead of its use (the row loop loads the next tile before
// it scans the current one). Problems that set kHoldsRawRuns (scan_problems.h) hold the run as
// loaded and convert it when it is used: converting a half-precision input at its load
// reads the loaded registers at once, so the thread would wait for the load there and the
// next tile's loads would overlap none of the current tile's work. Other problems hold values.
// `Holder` is the layout of the loaded elements (vector_io.h): PackedRun for runs loaded in
// wide accesses (the row loop), WidenedRun for element loads (the column kernel).
#pragma once

#include <type_traits>

#include "../../core/vector_io.h"

namespace parprims::cuda {

template <class P, int N, template <class, int> class Holder = PackedRun, class = void>
struct HeldRun {
  using Value = typename P::Value;
  struct Run {
    Value values[N];
  };
  template <class Cursor>
  static __device__ __forceinline__ bool load_run(const P& problem, const Cursor& c, int64_t lo, Run& run) {
    return problem.template load_run<N>(c, lo, run.values);
  }
  template <class Cursor>
  static __device__ __forceinline__ void load(const P& problem, const Cursor& c, int64_t pos, int k, Run& run) {
    run.values[k] = problem.load(c, pos);
  }
  static __device__ __forceinline__ Value value(const P&, const Run& run, int k) { return run.values[k]; }
};

template <class P, int N, template <class, int> class Holder>
struct HeldRun<P, N, Holder, std::enable_if_t<P::kHoldsRawRuns>> {
  using Value = typename P::Value;
  using Run = typename P::template RawRun<N, Holder>;
  template <class Cursor>
  static __device__ __forceinline__ bool load_run(const P& problem, const Cursor& c, int64_t lo, Run& run) {
    return problem.load_raw_run(c, lo, run);
  }
  template <class Cursor>
  static __device__ __forceinline__ void load(const P& problem, const Cursor& c, int64_t pos, int k, Run& run) {
    problem.load_raw(c, pos, k, run);
  }
  static __device__ __forceinline__ Value value(const P& problem, const Run& run, int k) {
    return problem.from_raw(run, k);
  }
};

}  // namespace parprims::cuda
