// Block layer: exclusive scan of one value per thread across the block (warp scans, then a
// scan of the warp totals through shared memory). The caller owns the shared memory.
#pragma once

#include "warp.cuh"

namespace parprims::cuda {

// Reverses a thread's run of items in registers (reverse scans load and store runs in memory
// order and scan them backwards).
template <class T, int N>
__device__ __forceinline__ void reverse_items(T (&items)[N]) {
#pragma unroll
  for (int k = 0; k < N / 2; ++k) {
    const T tmp = items[k];
    items[k] = items[N - 1 - k];
    items[N - 1 - k] = tmp;
  }
}

template <class M, int kThreads>
struct BlockScan {
  using T = typename M::value_type;
  static constexpr int kWarps = kThreads / 32;
  struct Storage {
    Words<T> warp_totals[kWarps];
  };

  // Returns this thread's exclusive prefix; `total` gets the block's aggregate (all threads).
  static __device__ __forceinline__ T exclusive(Storage& s, const T& v, T& total) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const T inclusive = warp_inclusive_scan<M>(v);
    if (lane == 31) s.warp_totals[warp].value = inclusive;
    __syncthreads();
    T warp_prefix = M::identity();
    total = M::identity();
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (w == warp) warp_prefix = total;
      total = M::combine(total, s.warp_totals[w].value);
    }
    T lane_prefix = shfl_up(inclusive, 1);
    if (lane == 0) lane_prefix = M::identity();
    return M::combine(warp_prefix, lane_prefix);
  }
};

}  // namespace parprims::cuda
