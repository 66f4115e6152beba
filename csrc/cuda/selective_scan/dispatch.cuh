// Typed launches of the selective-scan kernels on the caller's stream (launch_context.h).
#pragma once

#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>

#include "../engine/dependent_launch.cuh"
#include "common.cuh"
#include "launch.h"

namespace parprims::cuda {

// Calls f(In{}, Acc{}) for u's dtype: half types and float compute in float, double in double.
template <class F>
void visit_selective_scan_types(c10::ScalarType t, F&& f) {
  switch (t) {
    case c10::kFloat: return f(float{}, float{});
    case c10::kHalf: return f(c10::Half{}, float{});
    case c10::kBFloat16: return f(c10::BFloat16{}, float{});
    case c10::kDouble: return f(double{}, double{});
    default: TORCH_CHECK(false, "u: unsupported dtype ", t);
  }
}

template <class Kernel>
void allow_shared_memory(Kernel kernel, size_t smem) {
  if (smem > 48 * 1024) {
    int device = 0, most = 0;
    C10_CUDA_CHECK(cudaGetDevice(&device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    TORCH_CHECK(smem <= static_cast<size_t>(most), "selective_scan: this shape needs ", smem,
                " bytes of shared memory per block, more than the device's ", most);
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
}

// Whether `data` is aligned to two elements of In (a pair of steps in one access).
template <class In>
inline bool pair_aligned(const void* data) {
  return reinterpret_cast<uintptr_t>(data) % (2 * sizeof(In)) == 0;
}

// Whether a thread's item may be two time steps read in one load: every time-walked input (and
// out) contiguous in time, with its rows and pairs of steps aligned to two elements, and the
// length even (chunks and segments start at even steps, so every chunk then has an even count
// of steps, and an item is in the data or not as a whole).
template <class In>
inline bool steps_in_pairs(const SelectiveScanParams& p) {
  auto even = [](int64_t v) { return v % 2 == 0; };
  if (!even(p.len)) return false;
  auto aligned = [](const void* data) { return pair_aligned<In>(data); };
  for (const SeqTensor* t : {&p.u, &p.delta, &p.z, &p.out}) {
    if (t->data != nullptr && !(t->len_stride == 1 && even(t->batch_stride) && even(t->dim_stride) && aligned(t->data))) {
      return false;
    }
  }
  for (const StateInput* t : {&p.B, &p.C}) {
    if (!(t->len_stride == 1 && even(t->batch_stride) && even(t->group_stride) && even(t->state_stride) &&
          aligned(t->data))) {
      return false;
    }
  }
  return true;
}

// The same for the backward: the forward's inputs, the incoming gradient, and the input
// gradients it writes ((batch, dim, L) contiguous: aligned and of even length suffice).
template <class In>
inline bool steps_in_pairs(const SelectiveScanParams& p, const SelectiveScanGrads& g) {
  const SeqTensor& dout = g.dout;
  const bool dout_pairs = dout.len_stride == 1 && dout.batch_stride % 2 == 0 && dout.dim_stride % 2 == 0 &&
                          pair_aligned<In>(dout.data);
  bool grads_aligned = true;
  for (const void* grad : {g.du, g.ddelta, g.dz}) grads_aligned = grads_aligned && (grad == nullptr || pair_aligned<In>(grad));
  return steps_in_pairs<In>(p) && dout_pairs && grads_aligned;
}

// The 1-D grid of a launch of `blocks` tasks: the kernels walk their tasks grid-stride.
inline unsigned task_grid(int64_t blocks) {
  return static_cast<unsigned>(std::min<int64_t>(blocks, int64_t(1) << 24));
}

// Launches `kernel` in blocks of `threads` with `smem` bytes of dynamic shared memory, over a
// grid-stride 1-D grid.
template <class Kernel, class... Args>
void launch_blocks_of(int threads, const LaunchContext& ctx, Kernel kernel, size_t smem, int64_t blocks,
                      const Args&... args) {
  allow_shared_memory(kernel, smem);
  kernel<<<task_grid(blocks), threads, smem, ctx.stream>>>(args...);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The same as a programmatic dependent of the kernel before it (engine/dependent_launch.cuh).
template <class Kernel, class... Args>
void launch_blocks_after(int threads, const LaunchContext& ctx, Kernel kernel, size_t smem, int64_t blocks,
                         const Args&... args) {
  allow_shared_memory(kernel, smem);
  launch_after_with_smem(kernel, task_grid(blocks), static_cast<unsigned>(threads), smem, ctx, args...);
}

// The same in blocks of Policy::kThreads.
template <class Kernel, class... Args>
void launch_blocks(const LaunchContext& ctx, Kernel kernel, size_t smem, int64_t blocks, const Args&... args) {
  launch_blocks_of(Policy::kThreads, ctx, kernel, smem, blocks, args...);
}

// How many blocks of `kernel` (of `threads` threads) the GPU runs at once.
template <class Kernel>
int64_t resident_blocks(const LaunchContext& ctx, Kernel kernel, size_t smem, int threads = Policy::kThreads) {
  allow_shared_memory(kernel, smem);
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  return int64_t{per_sm} * ctx.sm_count;
}

// How the full pass of time segments gets the carries from the summaries: from a combine pass
// between the two, or folded by the full pass itself (the forward's packed rows at N = 16,
// time_segments.cuh).
enum class CarryJoin { kCombinePass, kFullPass };

// With time segments (s.segments > 1): runs `summary`, the combine pass over its results unless
// the full pass folds them, then `full`; otherwise `full` alone. The segments' buffers live for
// the call (stream-ordered).
template <class Acc, class Summary, class Full>
void run_time_segments(const LaunchContext& ctx, SelectiveScanShape s, const SelectiveScanParams& p, bool reverse,
                       Summary&& summary, Full&& full, CarryJoin join = CarryJoin::kCombinePass) {
  if (s.segments > 1) {
    const int64_t per_segment = p.batch * p.dim * p.dstate;
    const size_t bytes = static_cast<size_t>(s.segments * per_segment) * sizeof(Acc);
    s.segment_state = ctx.workspace->allocate(bytes);
    s.segment_decay = ctx.workspace->allocate(bytes);
    SelectiveScanShape walked_first = s;  // every segment but the one walked last
    walked_first.blocks = s.channel_blocks * (s.segments - 1);
    walked_first.first_block = reverse ? s.channel_blocks : 0;
    summary(walked_first);
    if (join == CarryJoin::kFullPass) return full(s);
    const int threads = 256;
    const auto grid = static_cast<unsigned>(std::min<int64_t>((per_segment + threads - 1) / threads, 1 << 20));
    combine_segments_kernel<Acc><<<grid, threads, 0, ctx.stream>>>(
        static_cast<Acc*>(s.segment_state), static_cast<const Acc*>(s.segment_decay), s.segments, per_segment,
        reverse);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  full(s);
}

}  // namespace parprims::cuda
