// The parts of a selective-scan backward chunk (selective_scan/backward.cuh) that do not walk
// time: the block's shared memory (BackwardChunk lays it out, BackwardShared names its arrays),
// and the chunk's end: the input gradients of the thread's items (finish_items) and the block's
// sums of variable dB and dC (store_BC_partials; backward_sums.cuh adds them over the blocks,
// reading them where its BCPartials says, which must agree with this store); and the order in
// which a whole chunk's steps are unrolled (walk_whole_chunk).
#pragma once

#include <utility>

#include "backward_sums.cuh"
#include "common.cuh"

namespace parprims::cuda {

template <class In, class Acc>
struct BackwardChunk {
  static constexpr int K = kSelectiveScanCheckpointEvery;
  static constexpr int kPitch = K + 1;
  static constexpr int kWarps = Policy::kThreads / 32;

  // In Acc: the recomputed state entering each step by [step][thread][state] (a thread's
  // states in one vector access); B, C by [step][state] (the same); delta, u, dy, the finish's
  // factors of dz and d(delta), and the channel's sums of y, l B and da A over its states
  // (3) by [channel][step]; the warps' dB/dC sums by [warp][2 * state][step]. The states first:
  // their rows are 16-byte aligned. The finish's terms of the per-channel D and delta_bias sums
  // ([channel][step], 2) reuse the entering states' memory: they are written after the walk
  // back has read it, and read before the next chunk's recompute writes it.
  static constexpr int kChannelArrays = 8;
  static_assert(2 * Policy::kThreads * kPitch <= K * Policy::kThreads * kStates, "the sum terms fit");
  static size_t smem_bytes(const SelectiveScanShape& s, bool variable_B, bool variable_C) {
    const size_t entering = static_cast<size_t>(K) * Policy::kThreads * kStates;
    const size_t per_state = static_cast<size_t>(s.states_per_tile) * K * 2;
    const size_t per_channel = kChannelArrays * static_cast<size_t>(s.channels_per_block) * kPitch;
    const size_t constants = 2 * static_cast<size_t>(s.channels_per_block);  // delta_bias, D
    const size_t reduced = (variable_B || variable_C) ? static_cast<size_t>(kWarps) * 2 * s.states_per_tile * kPitch : 0;
    return (entering + per_state + per_channel + constants + reduced) * sizeof(Acc);
  }
};

// The block's shared arrays (BackwardChunk's layout), for a block of channels_per_block
// channels and S states a tile.
template <class Acc>
struct BackwardShared {
  Acc* entering;  // the recomputed state entering each step, [step][thread][kStates]
  Acc* B;         // [step][state]
  Acc* C;
  // [channel][step]:
  Acc* delta;
  Acc* u;
  Acc* dy;             // dout * silu(z)
  Acc* dz_factor;      // dout * silu'(z): dz = this * (y + D u)
  Acc* ddelta_factor;  // d(delta) / d(raw delta)
  // Sums over the channel's states: y = sum C h; and, with l the state gradient entering a step
  // and da its gate's, sum l B (du = delta * this, d(delta) gets u * this) and sum da A.
  Acc* y;
  Acc* lB;
  Acc* daA;
  Acc* dD_terms;     // the finish's terms of the D and delta_bias sums (over `entering`)
  Acc* dbias_terms;
  Acc* delta_bias;  // by channel, staged once per block
  Acc* D;
  Acc* red;  // the warps' dB and dC sums, [warp][2 * S][step]

  __device__ __forceinline__ BackwardShared(unsigned char* raw, int channels_per_block, int S) {
    constexpr int K = kSelectiveScanCheckpointEvery, kPitch = K + 1;
    const int pc = channels_per_block * kPitch;
    entering = reinterpret_cast<Acc*>(raw);
    B = entering + K * Policy::kThreads * kStates;
    C = B + K * S;
    delta = C + K * S;
    u = delta + pc;
    dy = u + pc;
    dz_factor = dy + pc;
    ddelta_factor = dz_factor + pc;
    dD_terms = entering;
    dbias_terms = dD_terms + pc;
    y = ddelta_factor + pc;
    lB = y + pc;
    daA = lB + pc;
    delta_bias = daA + pc;
    D = delta_bias + channels_per_block;
    red = D + channels_per_block;
  }
};

// Stages one (channel, step) of a chunk at `at`: what the steps and the finish need of it (the
// summary needs delta and dy alone), so that the finish reads no input again.
template <class Acc, bool kSummary>
__device__ __forceinline__ void stage_element(const BackwardShared<Acc>& sm, int at, Acc u, Acc delta, Acc z, Acc dout,
                                              Acc bias, bool softplus, bool has_z, bool real) {
  Acc dl, ddelta_factor;
  fast_processed_delta_and_grad(delta, bias, softplus, dl, ddelta_factor);
  Acc dy = dout, dz_factor = Acc(0);
  if (has_z) {
    const Acc sig = fast_sigmoid(z);
    dy = dout * z * sig;
    dz_factor = dout * sig * (Acc(1) + z * (Acc(1) - sig));
  }
  sm.delta[at] = real ? dl : Acc(0);
  sm.dy[at] = dy;
  if constexpr (!kSummary) {
    sm.u[at] = u;
    sm.dz_factor[at] = dz_factor;
    sm.ddelta_factor[at] = ddelta_factor;
  }
}

// Step 4 of a chunk, for the thread's items: du, d(delta) and dz from the channel's sums of y,
// l B and da A and the staged factors (with several state tiles, the sums run on in the
// shape's scratch until the last tile), and each item's terms of the per-channel D and
// delta_bias sums. Rolled up: unrolled, its rounds' loads and stores cost the walk back
// registers (measured 1-3 % slower).
template <class In, class Acc, int kSteps, class ItemReal>
__device__ __forceinline__ void finish_items(const BackwardShared<Acc>& sm, const SelectiveScanGrads& gr,
                                             const SelectiveScanShape& s, const ItemWalk& items, int item_rounds,
                                             const ItemReal& item_real, int steps, const StridedWalk& grad_walk,
                                             bool has_z, int state_tiles, bool first_tile, bool last_tile) {
  constexpr int kPitch = kSelectiveScanCheckpointEvery + 1;
#pragma unroll 1
  for (int r = 0; r < item_rounds; ++r) {
    if (!item_real(r, steps)) continue;
    const int channel = items.row(r);
    const int64_t flat = grad_walk.at(r);  // the item's first step
    const Acc Dd = sm.D[channel];
    Acc du_out[kSteps], ddelta_out[kSteps], dz_out[kSteps];
    bool done = true;  // the tile's sums are the whole sums (the last tile, or the only one)
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      const int at = channel * kPitch + items.column(r) * kSteps + k;
      Acc y = sm.y[at], lB = sm.lB[at], daA = sm.daA[at];
      if (state_tiles > 1) {  // (one step an item)
        Acc* ys = static_cast<Acc*>(s.y_scratch);
        Acc* lBs = static_cast<Acc*>(s.lB_scratch);
        Acc* daAs = static_cast<Acc*>(s.daA_scratch);
        if (!first_tile) {
          y += ys[flat + k];
          lB += lBs[flat + k];
          daA += daAs[flat + k];
        }
        if (!last_tile) {
          ys[flat + k] = y;
          lBs[flat + k] = lB;
          daAs[flat + k] = daA;
          done = false;
          continue;
        }
      }
      const Acc u = sm.u[at], dy = sm.dy[at], delta = sm.delta[at];
      dz_out[k] = sm.dz_factor[at] * (y + Dd * u);
      ddelta_out[k] = (u * lB + daA) * sm.ddelta_factor[at];
      du_out[k] = delta * lB + dy * Dd;
      // The terms of the per-channel sums (taken by the kernel after the chunk).
      sm.dD_terms[at] = dy * u;
      sm.dbias_terms[at] = ddelta_out[k];
    }
    if (!done) continue;
    if (has_z) store_steps<In, Acc, kSteps>(static_cast<In*>(gr.dz) + flat, dz_out);
    store_steps<In, Acc, kSteps>(static_cast<In*>(gr.du) + flat, du_out);
    store_steps<In, Acc, kSteps>(static_cast<In*>(gr.ddelta) + flat, ddelta_out);
  }
}

// The block's sums of variable dB and dC at the chunk's steps (over its warps' rows, in
// warp order), each written once: over the checkpoint slots the chunk read at its
// start (see SelectiveScanGrads), whose states are contiguous, so lanes take
// consecutive states; else in the rows, whose steps are. One loop for both: a loop for
// each made the N = 16 kernel 9 % longer (5160 instructions against 4744; one loop:
// 4832) and fwd+bwd 2 % slower (1.50 against 1.47 ms at (8, 1536, 2048, 16), H200).
// (Chunk c of batch row b, channels from d0; the tile's states from tile_n0, S of them.) The
// sums' order is BCSumPlace's, which the pass after the kernel shares; the addresses are
// computed here rather than through its BCPartials, which compiled this kernel to slower code
// (see SelectiveScanGradTotals).
// kS: S when known at compile time (the fixed instance's 16), else 0. Then the thread's sums are
// whole rounds of the block, unrolled, and each round's place is the previous one's plus a
// constant (no division and no 64-bit multiply a sum).
template <class Acc, int kS = 0>
__device__ __forceinline__ void store_BC_partials(const BackwardShared<Acc>& sm, const SelectiveScanParams& p,
                                                  const SelectiveScanGrads& gr, int64_t b, int64_t d0, int64_t c,
                                                  int S_shape, int steps, int64_t t0, int64_t tile_n0,
                                                  bool B_variable, bool C_variable, Acc* dB_rows, Acc* dC_rows) {
  constexpr int K = kSelectiveScanCheckpointEvery, kPitch = K + 1, kWarps = Policy::kThreads / 32;
  const int S = kS > 0 ? kS : S_shape;
  const bool over_checkpoints = gr.BC_partials_over_checkpoints;
  Acc* slots = static_cast<Acc*>(p.checkpoints) + ((b * p.dim + d0) * p.checkpoint_chunks + c) * p.dstate;
  const int64_t slot_stride = p.checkpoint_chunks * p.dstate;
  // What consecutive threads walk: a constant when kS is K (the fixed instance), whichever
  // layout the partials take.
  const int lane_extent = (kS > 0 && kS == K) ? K : over_checkpoints ? S : K;
  auto store_sum = [&](int f) {
    const BCSumPlace place(f, S, lane_extent, over_checkpoints);
    if (!place.real(steps, B_variable, C_variable, tile_n0, p.dstate)) return;
    const auto [is_C, state, step] = place;
    Acc sum = 0;
    for (int w = 0; w < kWarps; ++w) sum += sm.red[(w * 2 * S + (is_C ? S : 0) + state) * kPitch + step];
    Acc* to = over_checkpoints ? slots + (2 * step + is_C) * slot_stride + state
                               : (is_C ? dC_rows : dB_rows) + state * p.len + t0 + step;
    *to = sum;
  };
  if constexpr (kS > 0 && (2 * kS * K) % Policy::kThreads == 0) {
#pragma unroll
    for (int round = 0; round < 2 * kS * K / Policy::kThreads; ++round) {
      store_sum(threadIdx.x + round * Policy::kThreads);
    }
  } else {
    for (int f = threadIdx.x; f < 2 * S * K; f += Policy::kThreads) store_sum(f);
  }
}

// A step's place in a whole chunk walked in groups of steps (WholeChunkStep<k>: the k-th step of
// its group, known at compile time) or in a chunk walked one checked step at a time (CheckedStep).
template <int k>
struct WholeChunkStep {
  static constexpr bool value = true;  // no per-step sequence checks
  static constexpr int position = k;
};
struct CheckedStep {
  static constexpr bool value = false;
  static constexpr int position = 0;
};

// Runs step(i, WholeChunkStep<i % kGroup>{}) over a whole chunk's K steps, in order (kForward) or
// from the last: each group of kGroup steps unrolled, the groups rolled up, so that the hot
// loop's code is a group's and not the whole chunk's (Policy::kBackwardWalkGroup says why).
template <int K, int kGroup, bool kForward, class Step, int... k>
__device__ __forceinline__ void walk_whole_chunk(Step&& step, std::integer_sequence<int, k...>) {
  static_assert(K % kGroup == 0 && sizeof...(k) == kGroup, "whole groups");
  if constexpr (kForward) {
#pragma unroll 1
    for (int g = 0; g < K; g += kGroup) (step(g + k, WholeChunkStep<k>{}), ...);
  } else {
#pragma unroll 1
    for (int g = K - kGroup; g >= 0; g -= kGroup) (step(g + kGroup - 1 - k, WholeChunkStep<kGroup - 1 - k>{}), ...);
  }
}
template <int K, int kGroup, bool kForward, class Step>
__device__ __forceinline__ void walk_whole_chunk(Step&& step) {
  walk_whole_chunk<K, kGroup, kForward>(step, std::make_integer_sequence<int, kGroup>{});
}

}  // namespace parprims::cuda
