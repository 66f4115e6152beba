// The fused selective-scan forward. A block owns channels_per_block channels of one batch row
// (one group of B/C) for the whole sequence; each thread keeps kStates states of one channel
// in registers and walks time sequentially (the affine recurrence h = a*h + b, one update per
// step: the least work per state and no cross-thread scan). Per chunk of kForwardChunk steps:
//   1. stage: the block loads u and delta once per (channel, step), computes
//      delta = softplus(delta + bias) and delta*u, and loads the chunk of variable B and C;
//   2. steps: every thread updates its states; y's per-thread partial sums are added across the
//      channel's lanes with shuffles;
//   3. finish: the block writes out = (y + D*u) * silu(z), coalesced.
// The states entering every kSelectiveScanCheckpointEvery-th step are saved for the backward
// when asked. Nothing of size (batch, dim, N, L) is ever written.
#pragma once

#include "common.cuh"

namespace parprims::cuda {

template <class In, class Acc>
struct ForwardChunk {
  static constexpr int K = Policy::kForwardChunk;
  static constexpr int kPitch = K + 1;  // per-channel rows padded: channels map to distinct banks

  // Shared memory, in Acc: delta, delta*u, u, y by [channel][step]; B and C by [step][state].
  static size_t smem_bytes(const SelectiveScanShape& s, bool variable_B, bool variable_C) {
    const size_t per_channel = 4 * static_cast<size_t>(s.channels_per_block) * kPitch;
    const size_t per_state = static_cast<size_t>(K) * s.states_per_tile * ((variable_B ? 1 : 0) + (variable_C ? 1 : 0));
    return (per_channel + per_state) * sizeof(Acc);
  }
};

template <class In, class Acc>
__global__ void __launch_bounds__(Policy::kThreads)
    selective_scan_forward_kernel(const SelectiveScanParams p, const SelectiveScanShape s) {
  using Chunk = ForwardChunk<In, Acc>;
  constexpr int K = Chunk::K, kPitch = Chunk::kPitch;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Acc* s_delta = reinterpret_cast<Acc*>(smem_raw);
  Acc* s_deltau = s_delta + s.channels_per_block * kPitch;
  Acc* s_u = s_deltau + s.channels_per_block * kPitch;
  Acc* s_y = s_u + s.channels_per_block * kPitch;
  Acc* s_B = s_y + s.channels_per_block * kPitch;
  Acc* s_C = s_B + (p.B.variable ? K * s.states_per_tile : 0);
  const bool time_fastest = p.u.len_stride == 1;
  const int items = s.channels_per_block * K;
  const Acc* A = static_cast<const Acc*>(p.A);
  const Acc* init = static_cast<const Acc*>(p.initial_state);
  Acc* last = static_cast<Acc*>(p.last_state);
  Acc* y_scratch = static_cast<Acc*>(s.y_scratch);

  for (int64_t block = blockIdx.x; block < s.blocks; block += gridDim.x) {
    const ThreadPlace me(p, s, block);
    const int64_t d0 = me.first_channel(p, s);
    for (int tile = 0; tile < s.state_tiles; ++tile) {
      const bool last_tile = tile + 1 == s.state_tiles;
      const int64_t n0 = static_cast<int64_t>(tile) * s.states_per_tile + me.quad * kStates;
      // ---- the thread's states: gates, constant B/C, initial values ----
      Acc A2[kStates], Bc[kStates], Cc[kStates], h[kStates];
      bool has_state[kStates];
#pragma unroll
      for (int j = 0; j < kStates; ++j) {
        const int64_t n = n0 + j;
        has_state[j] = me.active && n < p.dstate;
        A2[j] = has_state[j] ? A[me.d * p.dstate + n] * Gate<Acc>::kScale : Acc(0);
        Bc[j] = (has_state[j] && !p.B.variable) ? static_cast<const Acc*>(p.B.data)[p.B.offset(0, 0, me.d, n, 0)] : Acc(0);
        Cc[j] = (has_state[j] && !p.C.variable) ? static_cast<const Acc*>(p.C.data)[p.C.offset(0, 0, me.d, n, 0)] : Acc(0);
      }
      int64_t seq = p.offsets ? 0 : me.b;
      int64_t seq_end = sequence_end(p, seq);
      auto load_initial = [&](int64_t k) {
#pragma unroll
        for (int j = 0; j < kStates; ++j) {
          h[j] = (init && has_state[j]) ? init[(k * p.dim + me.d) * p.dstate + n0 + j] : Acc(0);
        }
      };
      auto save_last = [&](int64_t k) {
#pragma unroll
        for (int j = 0; j < kStates; ++j) {
          if (has_state[j]) last[(k * p.dim + me.d) * p.dstate + n0 + j] = h[j];
        }
      };
      load_initial(seq);

      for (int64_t c0 = 0; c0 < p.len; c0 += K) {
        const int steps = static_cast<int>(p.len - c0 < K ? p.len - c0 : K);
        __syncthreads();  // the previous chunk's finish has read the shared arrays
        // ---- 1. stage ----
        for (int idx = threadIdx.x; idx < items; idx += blockDim.x) {
          const ChunkItem it(idx, s.channels_per_block, K, time_fastest);
          Acc dl = 0, u = 0;
          if (it.step < steps && me.has_channel(p, s, it.channel)) {
            const int64_t d = d0 + it.channel, t = c0 + it.step;
            const Acc bias = p.delta_bias ? static_cast<const Acc*>(p.delta_bias)[d] : Acc(0);
            dl = processed_delta(load_as<In, Acc>(p.delta.data, p.delta.offset(me.b, d, t)), bias, p.delta_softplus);
            u = load_as<In, Acc>(p.u.data, p.u.offset(me.b, d, t));
          }
          s_delta[it.channel * kPitch + it.step] = dl;
          s_deltau[it.channel * kPitch + it.step] = dl * u;
          s_u[it.channel * kPitch + it.step] = u;
        }
        auto stage_states = [&](const StateInput& P, Acc* dst) {
          const int n_items = K * s.states_per_tile;
          const bool t_fast = P.len_stride == 1;
          for (int idx = threadIdx.x; idx < n_items; idx += blockDim.x) {
            const int step = t_fast ? idx % K : idx / s.states_per_tile;
            const int n = t_fast ? idx / K : idx % s.states_per_tile;
            const int64_t ng = static_cast<int64_t>(tile) * s.states_per_tile + n;
            dst[step * s.states_per_tile + n] =
                (step < steps && ng < p.dstate) ? load_as<In, Acc>(P.data, P.offset(me.b, me.group, 0, ng, c0 + step))
                                                : Acc(0);
          }
        };
        if (p.B.variable) stage_states(p.B, s_B);
        if (p.C.variable) stage_states(p.C, s_C);
        __syncthreads();

        // ---- 2. steps ----
        for (int i = 0; i < steps; ++i) {
          const int64_t t = c0 + i;
          if (p.offsets) {
            while (seq + 1 < p.num_seqs && t >= seq_end) {  // a sequence ends: save, restart
              save_last(seq);
              seq_end = sequence_end(p, ++seq);
              load_initial(seq);
            }
          }
          if (p.checkpoints && t % kSelectiveScanCheckpointEvery == 0) {
            Acc* ck = static_cast<Acc*>(p.checkpoints) +
                      ((me.b * p.dim + me.d) * p.checkpoint_chunks + t / kSelectiveScanCheckpointEvery) * p.dstate;
#pragma unroll
            for (int j = 0; j < kStates; ++j) {
              if (has_state[j]) ck[n0 + j] = h[j];
            }
          }
          const Acc dl = s_delta[me.channel * kPitch + i];
          const Acc du = s_deltau[me.channel * kPitch + i];
          Acc y = 0;
#pragma unroll
          for (int j = 0; j < kStates; ++j) {
            const Acc Bt = p.B.variable ? s_B[i * s.states_per_tile + me.quad * kStates + j] : Bc[j];
            const Acc Ct = p.C.variable ? s_C[i * s.states_per_tile + me.quad * kStates + j] : Cc[j];
            h[j] = Gate<Acc>::exp_scaled(dl * A2[j]) * h[j] + du * Bt;
            y += Ct * h[j];
          }
          y = sum_over_channel(y, s.threads_per_channel);
          if (me.quad == 0) s_y[me.channel * kPitch + i] = y;
        }
        __syncthreads();

        // ---- 3. finish: out = (y + D u) silu(z), or y's partial sum into the scratch ----
        for (int idx = threadIdx.x; idx < items; idx += blockDim.x) {
          const ChunkItem it(idx, s.channels_per_block, K, time_fastest);
          if (it.step >= steps || !me.has_channel(p, s, it.channel)) continue;
          const int64_t d = d0 + it.channel, t = c0 + it.step;
          Acc y = s_y[it.channel * kPitch + it.step];
          if (s.state_tiles > 1) {
            Acc& acc = y_scratch[(me.b * p.dim + d) * p.len + t];
            if (tile > 0) y += acc;
            if (!last_tile) {
              acc = y;
              continue;
            }
          }
          if (p.D) y += static_cast<const Acc*>(p.D)[d] * s_u[it.channel * kPitch + it.step];
          if (p.z.data) y *= silu(load_as<In, Acc>(p.z.data, p.z.offset(me.b, d, t)));
          static_cast<In*>(const_cast<void*>(p.out.data))[p.out.offset(me.b, d, t)] = static_cast<In>(y);
        }
      }
      // The last sequence's state, then empty sequences after it keep their initial state.
      const int64_t last_seq = p.offsets ? p.num_seqs - 1 : me.b;
      for (; seq <= last_seq; ++seq) {
        save_last(seq);
        if (seq < last_seq) load_initial(seq + 1);
      }
    }
  }
}

}  // namespace parprims::cuda
