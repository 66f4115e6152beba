// The pass after the selective-scan backward (backward.cuh) that adds its partial sums, each in a
// fixed order, so that gradients are the same on every run: variable dB and dC over the channel
// blocks of a group, and dA, constant dB and dC, dD and d(delta_bias) over the (time segment,
// batch row) tasks. One launch for all of them, writing the gradients in their own layout and
// dtype (as torch's sums over the partials, their permute and their casts did in five reductions
// and four copies: 66 us of the 1.20 ms fwd+bwd at (8, 1536, 2048, 16) in bfloat16, H100).
// No atomics: a fence a chunk for the last of a chunk's blocks to add the others' sums inside
// the backward (a GPU-scope release, MEMBAR.ALL.GPU, or __threadfence) took it from 0.88 to
// 2.75 ms.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common.cuh"

namespace parprims::cuda {

// Sum f of a chunk's 2 S K sums of variable dB and dC: whose (is_C), which state and step, in
// the order consecutive threads take them: by state over the checkpoints (whose states are
// contiguous), else by step (the partials' rows' steps are). lane_extent: S or K as that
// order has it (a constant in the fixed instance, where S is K).
struct BCSumPlace {
  bool is_C;
  int state, step;
  __device__ __forceinline__ BCSumPlace(int f, int S, int lane_extent, bool by_state) {
    const int inner = f % lane_extent, outer = f / lane_extent;
    is_C = by_state ? (outer & 1) : outer >= S;
    state = by_state ? inner : outer - (is_C ? S : 0);
    step = by_state ? outer >> 1 : inner;
  }
  // Whether the sum exists: a step of the chunk, of a variable input, of a state of the tile.
  __device__ __forceinline__ bool real(int steps, bool B_variable, bool C_variable, int64_t tile_n0,
                                       int64_t dstate) const {
    return step < steps && (is_C ? C_variable : B_variable) && tile_n0 + state < dstate;
  }
};

// Where the channel blocks of a (batch row, group) keep their sums of variable dB and dC of a
// chunk (SelectiveScanGrads): over the checkpoint slots of the block's channels at the chunk,
// channel 2 * step + is_C by state; or in the partials' rows (channel_blocks, batch, G, N, L).
// (store_BC_partials, backward_chunk.cuh, writes them there.)
template <class Acc>
struct BCPartials {
  Acc* B;  // block 0's sum of dB at the chunk's first step and the tile's first state (C: of dC)
  Acc* C;
  int64_t block_stride, state_stride, step_stride;
  bool by_state;  // the order of BCSumPlace that keeps consecutive threads on consecutive sums

  __device__ __forceinline__ BCPartials(const SelectiveScanParams& p, const SelectiveScanGrads& gr, int64_t b,
                                        int64_t group, int64_t c, int64_t tile_n0) {
    constexpr int K = kSelectiveScanCheckpointEvery;
    by_state = gr.BC_partials_over_checkpoints;
    if (by_state) {  // (one tile of states)
      const int64_t slot = p.checkpoint_chunks * p.dstate;  // channel to channel
      B = static_cast<Acc*>(p.checkpoints) +
          ((b * p.dim + group * p.dim_per_group) * p.checkpoint_chunks + c) * p.dstate;
      C = B + slot;
      block_stride = gr.channel_block * slot;
      state_stride = 1;
      step_stride = 2 * slot;
    } else {
      const int64_t first = ((b * p.groups + group) * p.dstate + tile_n0) * p.len + c * K;
      B = gr.dB_partial ? static_cast<Acc*>(gr.dB_partial) + first : nullptr;  // (the rows when B is variable)
      C = gr.dC_partial ? static_cast<Acc*>(gr.dC_partial) + first : nullptr;
      block_stride = p.batch * p.groups * p.dstate * p.len;
      state_stride = p.len;
      step_stride = 1;
    }
  }
  __device__ __forceinline__ Acc* at(int64_t block, const BCSumPlace& f) const {
    return (f.is_C ? C : B) + block * block_stride + f.state * state_stride + f.step * step_stride;
  }
};

// The block's chunk of variable dB and dC sums (of K steps from t0, `steps` of them; batch row
// b's group `group`; the tile's states from tile_n0, S of them): every channel block's sums, in
// block order, into `to`'s dB and dC. A thread adds four consecutive sums along
// the partials' contiguous dimension at once, one 16-byte load a block, where float sums there
// are aligned (one 4-byte load a sum and block read the 100 MB of (8, 1536, 2048, 16)'s
// partials at 2 TB/s, against a copy's 3). So it reads them at 79 % of the DRAM's peak (ncu,
// H100, 39 us); tasks of two chunks, a warp reading whole 128-byte lines where it reads eight
// 64-byte pieces 8 KB apart here, were slower (45 us: half the warps, 71 % of the peak).
template <class In, class Acc>
__device__ __forceinline__ void add_BC_partials(const SelectiveScanParams& p, const SelectiveScanGradTotals& to,
                                                const BCPartials<Acc>& parts, int64_t blocks, int64_t b,
                                                int64_t group, int64_t t0, int S, int steps, int64_t tile_n0) {
  constexpr int K = kSelectiveScanCheckpointEvery, kVector = 4;
  const int64_t first = ((b * p.groups + group) * p.dstate + tile_n0) * p.len + t0;
  In* dB = to.dB ? static_cast<In*>(to.dB) + first : nullptr;
  In* dC = to.dC ? static_cast<In*>(to.dC) + first : nullptr;
  const int lane_extent = parts.by_state ? S : K;
  const bool vectors = std::is_same_v<Acc, float> && (parts.by_state ? S % kVector == 0 && p.dstate % kVector == 0
                                                                      : p.len % kVector == 0);
  auto real = [&](const BCSumPlace& place) {
    return place.real(steps, p.B.variable, p.C.variable, tile_n0, p.dstate);
  };
  auto store = [&](const BCSumPlace& place, Acc sum) {
    (place.is_C ? dC : dB)[place.state * p.len + place.step] = static_cast<In>(sum);
  };
  const int per_thread = vectors ? kVector : 1;
  for (int f = threadIdx.x * per_thread; f < 2 * S * K; f += Policy::kThreads * per_thread) {
    const BCSumPlace place(f, S, lane_extent, parts.by_state);  // the thread's first sum
    const BCSumPlace last(f + per_thread - 1, S, lane_extent, parts.by_state);
    if constexpr (std::is_same_v<Acc, float>) {
      const float* first_block = parts.at(0, place);
      if (vectors && real(place) && real(last) && reinterpret_cast<uintptr_t>(first_block) % 16 == 0) {
        const float4* from = reinterpret_cast<const float4*>(first_block);
        const int64_t stride = parts.block_stride / kVector;
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 8
        for (int64_t j = 0; j < blocks; ++j) {
          const float4 v = from[j * stride];
          sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
        }
        const float sums[kVector] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
        for (int k = 0; k < kVector; ++k) store(BCSumPlace(f + k, S, lane_extent, parts.by_state), sums[k]);
        continue;
      }
    }
    for (int k = 0; k < per_thread; ++k) {  // one sum at a time: unaligned, or the chunk's edge
      const BCSumPlace one(f + k, S, lane_extent, parts.by_state);
      if (!real(one)) continue;
      const Acc* from = parts.at(0, one);
      Acc sum = 0;
#pragma unroll 8
      for (int64_t j = 0; j < blocks; ++j) sum += from[j * parts.block_stride];
      store(one, sum);
    }
  }
}

// The per-task sums of `channels` channels from d0: every (segment, batch row) task's (`rows`
// of them), in task order, into dA, constant dB and dC, dD and d(delta_bias).
template <class Acc>
__device__ __forceinline__ void add_task_partials(const SelectiveScanParams& p, const SelectiveScanGrads& gr,
                                                  const SelectiveScanGradTotals& to,
                                                  int64_t rows, int64_t d0, int64_t channels) {
  // Entries [first, first + count) of (rows, width) partial sums, summed over the rows into `total`.
  auto add_rows = [&](const void* partial, void* total, int64_t width, int64_t first, int64_t count) {
    for (int64_t i = first + threadIdx.x; i < first + count; i += Policy::kThreads) {
      const Acc* from = static_cast<const Acc*>(partial) + i;
      Acc sum = 0;
      for (int64_t r = 0; r < rows; ++r) sum += from[r * width];
      static_cast<Acc*>(total)[i] = sum;
    }
  };
  const int64_t per_row = p.dim * p.dstate, first = d0 * p.dstate, count = channels * p.dstate;
  add_rows(gr.dA_partial, to.dA, per_row, first, count);
  if (!p.B.variable) add_rows(gr.dB_partial, to.dB, per_row, first, count);
  if (!p.C.variable) add_rows(gr.dC_partial, to.dC, per_row, first, count);
  if (to.dD) add_rows(gr.dD_partial, to.dD, p.dim, d0, channels);
  if (to.ddelta_bias) add_rows(gr.ddelta_bias_partial, to.ddelta_bias, p.dim, d0, channels);
}

// The sums' tasks: a chunk of variable dB and dC by (batch row, group, state tile, chunk), then
// kSumChannels channels' per-task sums.
constexpr int64_t kSumChannels = 32;
__host__ __device__ inline int64_t BC_sum_tasks(const SelectiveScanParams& p, const SelectiveScanShape& s) {
  return (p.B.variable || p.C.variable) ? p.batch * p.groups * s.state_tiles * p.checkpoint_chunks : 0;
}
__host__ __device__ inline int64_t backward_sum_tasks(const SelectiveScanParams& p, const SelectiveScanShape& s) {
  return BC_sum_tasks(p, s) + (p.dim + kSumChannels - 1) / kSumChannels;
}

template <class In, class Acc>
__global__ void __launch_bounds__(Policy::kThreads)
    selective_scan_backward_sums_kernel(const SelectiveScanParams p, const SelectiveScanGrads gr,
                                        const SelectiveScanGradTotals to,
                                        const SelectiveScanShape s) {
  constexpr int64_t K = kSelectiveScanCheckpointEvery;
  const int64_t BC_tasks = BC_sum_tasks(p, s), tasks = backward_sum_tasks(p, s);
  for (int64_t task = blockIdx.x; task < tasks; task += gridDim.x) {
    if (task < BC_tasks) {
      const int64_t c = task % p.checkpoint_chunks, rest = task / p.checkpoint_chunks;
      const int64_t tile_n0 = (rest % s.state_tiles) * s.states_per_tile, row = rest / s.state_tiles;
      const int64_t group = row % p.groups, b = row / p.groups;
      const int steps = static_cast<int>(p.len - c * K < K ? p.len - c * K : K);
      add_BC_partials<In, Acc>(p, to, BCPartials<Acc>(p, gr, b, group, c, tile_n0), s.blocks_per_group, b, group,
                               c * K, s.states_per_tile, steps, tile_n0);
    } else {
      const int64_t d0 = (task - BC_tasks) * kSumChannels;
      add_task_partials<Acc>(p, gr, to, s.segments * p.batch, d0, p.dim - d0 < kSumChannels ? p.dim - d0 : kSumChannels);
    }
  }
}

}  // namespace parprims::cuda
