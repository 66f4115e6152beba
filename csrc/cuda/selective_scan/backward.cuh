// The fused selective-scan backward: a thread holds kStates states of one channel, as in the
// forward (with its own states per thread, Policy::kStatesPerThread). The block
// walks its rows' time backwards in chunks of K = kSelectiveScanCheckpointEvery steps:
//   1. stage: delta (after bias and softplus), u, dy = dout * silu(z), variable B and C;
//   2. recompute: from the checkpoint saved by the forward, each thread runs its states over
//      the chunk again, keeping the state entering each step in registers, and its part of y;
//   3. walk back: the reverse affine recurrence of the state gradient
//      g_t = C_t dy_t + exp(delta_{t+1} A) g_{t+1} (the same monoid as the forward, read from
//      the end), with every input's gradient term at each step;
//   4. finish: du, d(delta), dz; per-channel sums for D and delta_bias; the block's partial
//      sums of variable dB and dC, reduced over its channels in a fixed order.
// No floating-point atomics: every partial sum has one writer, and the host adds partials in
// a fixed order, so gradients are bitwise reproducible.
// With time segments (common.cuh), the summary instance (kSummary) walks each segment back
// from a zero gradient with only steps 1 and 3's state gradient, and writes the gradient
// entering the segment's first step and the product of its gates; the full instance then
// starts each segment's walk from the combined carry. Per-task partial sums get a row per
// (segment, batch row).
#pragma once

#include "common.cuh"

namespace parprims::cuda {

template <class In, class Acc>
struct BackwardChunk {
  static constexpr int K = kSelectiveScanCheckpointEvery;
  static constexpr int kPitch = K + 1;
  static constexpr int kWarps = Policy::kThreads / 32;

  // In Acc: delta, u, dy and the finish's per-channel sum terms (2) by [channel][step]; the threads' parts of y, du and
  // d(delta) by [part][thread][step] (summed over a channel's threads in the finish, not with
  // shuffles at every step); B, C by [step][state]; the warps' dB/dC sums by
  // [warp][step][2 * state].
  static size_t smem_bytes(const SelectiveScanShape& s, bool variable_B, bool variable_C) {
    const size_t per_channel = 5 * static_cast<size_t>(s.channels_per_block) * kPitch + 3 * Policy::kThreads * kPitch;
    const size_t per_state = static_cast<size_t>(K) * s.states_per_tile * 2;
    const size_t reduced = (variable_B || variable_C) ? static_cast<size_t>(kWarps) * K * 2 * s.states_per_tile : 0;
    (void)variable_B;
    return (per_channel + per_state + reduced) * sizeof(Acc);
  }
};

// Sums the 2 * kStates values of v (dB then dC of the lane's states) over the channels of a
// warp (the lanes that differ in the bits above the channel's lanes), in a fixed order. Each
// round halves the values a lane holds: the lane keeps one half and receives the partner's
// other half, so the warp spends kStates + kStates / 2 + ... + 1 shuffles instead of
// 2 * kStates per round. On return v[0, count)
// hold the sums of original entries [base, base + count); `writer` tells the one lane that
// stores each sum when several lanes hold it.
template <class Acc>
struct ChannelReduction {
  Acc v[2 * kStates];
  int base = 0, count = 2 * kStates;
  bool writer = true;

  template <int kHalf>
  __device__ __forceinline__ void halve(int mask) {
    const bool upper = (threadIdx.x & mask) != 0;
#pragma unroll
    for (int j = 0; j < kHalf; ++j) {
      const Acc send = upper ? v[j] : v[j + kHalf];
      const Acc keep = upper ? v[j + kHalf] : v[j];
      v[j] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
    }
    if (upper) base += kHalf;
    count = kHalf;
  }

  // Rounds over lane masks from `mask` down to threads_per_channel, kHalf values kept each.
  template <int kHalf>
  __device__ __forceinline__ void halve_from(int mask, int threads_per_channel) {
    if (mask < threads_per_channel) return;
    halve<kHalf>(mask);
    if constexpr (kHalf > 1) {
      halve_from<kHalf / 2>(mask >> 1, threads_per_channel);
    } else {
      for (mask >>= 1; mask >= threads_per_channel; mask >>= 1) {
        v[0] += __shfl_xor_sync(0xffffffffu, v[0], mask);
        if (threadIdx.x & mask) writer = false;
      }
    }
  }

  __device__ __forceinline__ void run(int threads_per_channel) { halve_from<kStates>(16, threads_per_channel); }
};

template <class In, class Acc, bool kSummary>
__global__ void __launch_bounds__(Policy::kThreads, Policy::kBackwardMinBlocksPerSM)
    selective_scan_backward_kernel(const SelectiveScanParams p, const SelectiveScanGrads gr,
                                   const SelectiveScanShape s) {
  using Chunk = BackwardChunk<In, Acc>;
  constexpr int K = Chunk::K, kPitch = Chunk::kPitch, kWarps = Chunk::kWarps;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int pc = s.channels_per_block * kPitch;
  Acc* s_delta = reinterpret_cast<Acc*>(smem_raw);
  Acc* s_u = s_delta + pc;
  Acc* s_dy = s_u + pc;
  Acc* s_dD_terms = s_dy + pc;  // the finish's terms of the D and delta_bias sums
  Acc* s_dbias_terms = s_dD_terms + pc;
  Acc* s_ypart = s_dbias_terms + pc;  // [thread][step]
  Acc* s_dupart = s_ypart + Policy::kThreads * kPitch;
  Acc* s_ddpart = s_dupart + Policy::kThreads * kPitch;
  Acc* s_B = s_ddpart + Policy::kThreads * kPitch;
  Acc* s_C = s_B + K * s.states_per_tile;
  Acc* s_red = s_C + K * s.states_per_tile;  // [warp][step][2 * states_per_tile]
  const bool variable_BC = p.B.variable || p.C.variable;
  const bool time_fastest = p.u.len_stride == 1;
  const int items = s.channels_per_block * K;
  const int warp = threadIdx.x >> 5;
  const Acc* A = static_cast<const Acc*>(p.A);
  const Acc* init = static_cast<const Acc*>(p.initial_state);
  const Acc* dlast = static_cast<const Acc*>(gr.dlast_state);
  const Acc* checkpoints = static_cast<const Acc*>(p.checkpoints);

  for (int64_t block = blockIdx.x; block < s.blocks; block += gridDim.x) {
    const ThreadPlace me(p, s, block);
    const int64_t d0 = me.first_channel(p, s);
    // Per-channel sums over time of the D and delta_bias gradients (thread c holds channel c).
    Acc dD_sum = 0, dbias_sum = 0;
    for (int tile = 0; tile < s.state_tiles; ++tile) {
      const bool first_tile = tile == 0, last_tile = tile + 1 == s.state_tiles;
      const int64_t n0 = static_cast<int64_t>(tile) * s.states_per_tile + me.quad * kStates;
      Acc Araw[kStates], A2[kStates], Bc[kStates], Cc[kStates];
      Acc lam[kStates], dA[kStates], dBc[kStates], dCc[kStates];
      Acc decay[kStates];  // the summary's product of the gates since the segment end or a sequence end
      bool has_state[kStates];
#pragma unroll
      for (int j = 0; j < kStates; ++j) {
        const int64_t n = n0 + j;
        has_state[j] = me.active && n < p.dstate;
        Araw[j] = has_state[j] ? A[me.d * p.dstate + n] : Acc(0);
        A2[j] = Araw[j] * Gate<Acc>::kScale;
        Bc[j] = (has_state[j] && !p.B.variable) ? static_cast<const Acc*>(p.B.data)[p.B.offset(0, 0, me.d, n, 0)] : Acc(0);
        Cc[j] = (has_state[j] && !p.C.variable) ? static_cast<const Acc*>(p.C.data)[p.C.offset(0, 0, me.d, n, 0)] : Acc(0);
        dA[j] = dBc[j] = dCc[j] = Acc(0);
        // The gradient entering the segment's last step: the combined carry (zero for the last
        // segment, and always in the summary).
        const Acc* carry = static_cast<const Acc*>(s.segment_state);
        lam[j] = (!kSummary && s.segments > 1 && has_state[j]) ? carry[me.segment_at(p, n0 + j)] : Acc(0);
        decay[j] = Acc(1);
      }
      auto state_at = [&](const Acc* base, int64_t k, int j) {
        return (base && has_state[j]) ? base[(k * p.dim + me.d) * p.dstate + n0 + j] : Acc(0);
      };
      // Walking back, the sequence of the current step.
      int64_t seq_back = p.offsets ? sequence_of(p, me.t_end - 1) : me.b;
      // Whether step t ends (starts) its sequence; at an end the walk restarts from the
      // sequence's last-state gradient.
      auto step_bounds = [&](int64_t t, bool& ends, bool& starts) {
        ends = t == p.len - 1, starts = t == 0;
        if (p.offsets) {
          while (seq_back > 0 && t < p.seq_offset(seq_back)) --seq_back;
          ends = t + 1 == sequence_end(p, seq_back);
          starts = t == p.seq_offset(seq_back);
        }
        if (ends) {
#pragma unroll
          for (int j = 0; j < kStates; ++j) {
            lam[j] = state_at(dlast, seq_back, j);
            decay[j] = Acc(0);
          }
        }
      };

      for (int64_t c = (me.t_end - 1) / K; c >= me.t_begin / K; --c) {
        const int64_t t0 = c * K;
        const int steps = static_cast<int>(p.len - t0 < K ? p.len - t0 : K);
        __syncthreads();
        // ---- 1. stage ----
        for (int idx = threadIdx.x; idx < items; idx += blockDim.x) {
          const ChunkItem it(idx, s.channels_per_block, K, time_fastest);
          Acc dl = 0, u = 0, dy = 0;
          if (it.step < steps && me.has_channel(p, s, it.channel)) {
            const int64_t d = d0 + it.channel, t = t0 + it.step;
            const Acc bias = p.delta_bias ? static_cast<const Acc*>(p.delta_bias)[d] : Acc(0);
            dl = fast_processed_delta(load_as<In, Acc>(p.delta.data, p.delta.offset(me.b, d, t)), bias, p.delta_softplus);
            if (!kSummary) u = load_as<In, Acc>(p.u.data, p.u.offset(me.b, d, t));
            dy = load_as<In, Acc>(gr.dout.data, gr.dout.offset(me.b, d, t));
            if (p.z.data) dy *= fast_silu(load_as<In, Acc>(p.z.data, p.z.offset(me.b, d, t)));
          }
          s_delta[it.channel * kPitch + it.step] = dl;
          s_u[it.channel * kPitch + it.step] = u;
          s_dy[it.channel * kPitch + it.step] = dy;
        }
        auto stage_states = [&](const StateInput& P, Acc* dst) {
          const int n_items = K * s.states_per_tile;
          const bool t_fast = P.len_stride == 1;
          for (int idx = threadIdx.x; idx < n_items; idx += blockDim.x) {
            const int step = t_fast ? idx % K : idx / s.states_per_tile;
            const int n = t_fast ? idx / K : idx % s.states_per_tile;
            const int64_t ng = static_cast<int64_t>(tile) * s.states_per_tile + n;
            dst[step * s.states_per_tile + n] =
                (step < steps && ng < p.dstate) ? load_as<In, Acc>(P.data, P.offset(me.b, me.group, 0, ng, t0 + step))
                                                : Acc(0);
          }
        };
        if (p.B.variable && !kSummary) stage_states(p.B, s_B);
        if (p.C.variable) stage_states(p.C, s_C);
        __syncthreads();

        if constexpr (kSummary) {
          // ---- the state gradient alone, back over the chunk ----
#pragma unroll
          for (int i = K - 1; i >= 0; --i) {
            if (i >= steps) continue;
            bool ends, starts;
            step_bounds(t0 + i, ends, starts);
            const Acc dl = s_delta[me.channel * kPitch + i];
            const Acc dy = s_dy[me.channel * kPitch + i];
#pragma unroll
            for (int j = 0; j < kStates; ++j) {
              const Acc Ct = p.C.variable ? s_C[i * s.states_per_tile + me.quad * kStates + j] : Cc[j];
              const Acc a = Gate<Acc>::exp_scaled(dl * A2[j]);
              lam[j] = a * (lam[j] + Ct * dy);
              decay[j] *= a;
            }
          }
        } else {
          // ---- 2. recompute the chunk's states from its checkpoint ----
          Acc h_in[K][kStates];  // the state entering each step
          {
            Acc h[kStates];
#pragma unroll
            for (int j = 0; j < kStates; ++j) {
              h[j] = has_state[j] ? checkpoints[((me.b * p.dim + me.d) * p.checkpoint_chunks + c) * p.dstate + n0 + j]
                                  : Acc(0);
            }
            int64_t seq = p.offsets ? sequence_of(p, t0) : me.b;
#pragma unroll
            for (int i = 0; i < K; ++i) {
              if (i < steps) {
                const int64_t t = t0 + i;
                if (p.offsets && i > 0) {
                  while (seq + 1 < p.num_seqs && t >= p.seq_offset(seq + 1)) {
                    ++seq;
#pragma unroll
                    for (int j = 0; j < kStates; ++j) h[j] = state_at(init, seq, j);
                  }
                }
                const Acc dl = s_delta[me.channel * kPitch + i];
                const Acc du = dl * s_u[me.channel * kPitch + i];
                Acc y = 0;
#pragma unroll
                for (int j = 0; j < kStates; ++j) {
                  const Acc Bt = p.B.variable ? s_B[i * s.states_per_tile + me.quad * kStates + j] : Bc[j];
                  const Acc Ct = p.C.variable ? s_C[i * s.states_per_tile + me.quad * kStates + j] : Cc[j];
                  h_in[i][j] = h[j];
                  h[j] = Gate<Acc>::exp_scaled(dl * A2[j]) * h[j] + du * Bt;
                  y += Ct * h[j];
                }
                s_ypart[threadIdx.x * kPitch + i] = y;
              }
            }
          }

          // ---- 3. walk back ----
#pragma unroll
          for (int i = K - 1; i >= 0; --i) {
            if (i < steps) {
              bool ends, starts;
              step_bounds(t0 + i, ends, starts);
              const Acc dl = s_delta[me.channel * kPitch + i];
              const Acc u = s_u[me.channel * kPitch + i];
              const Acc dy = s_dy[me.channel * kPitch + i];
              Acc ddelta_part = 0, du_part = 0;
              ChannelReduction<Acc> red;
#pragma unroll
              for (int j = 0; j < kStates; ++j) {
                const Acc Bt = p.B.variable ? s_B[i * s.states_per_tile + me.quad * kStates + j] : Bc[j];
                const Acc Ct = p.C.variable ? s_C[i * s.states_per_tile + me.quad * kStates + j] : Cc[j];
                const Acc a = Gate<Acc>::exp_scaled(dl * A2[j]);
                const Acc hp = h_in[i][j];
                const Acc l = lam[j] + Ct * dy;
                const Acc dB = l * dl * u;
                const Acc dC = dy * (a * hp + dl * u * Bt);
                const Acc da = l * hp * a;
                ddelta_part += l * Bt * u + da * Araw[j];
                du_part += l * Bt * dl;
                dA[j] += da * dl;
                lam[j] = a * l;
                red.v[j] = dB;
                red.v[kStates + j] = dC;
                if (!p.B.variable) dBc[j] += dB;
                if (!p.C.variable) dCc[j] += dC;
              }
              if (starts && gr.dinitial) {
#pragma unroll
                for (int j = 0; j < kStates; ++j) {
                  if (!has_state[j]) continue;
                  static_cast<Acc*>(gr.dinitial)[(seq_back * p.dim + me.d) * p.dstate + n0 + j] = lam[j];
                }
              }
              s_ddpart[threadIdx.x * kPitch + i] = ddelta_part;
              s_dupart[threadIdx.x * kPitch + i] = du_part;
              if (variable_BC) {
                red.run(s.threads_per_channel);
                if (red.writer) {
                  Acc* row = s_red + (warp * K + i) * 2 * s.states_per_tile;
#pragma unroll
                  for (int j = 0; j < 2 * kStates; ++j) {
                    if (j >= red.count) break;
                    const int entry = red.base + j;  // dB of state entry, or dC of state entry - kStates
                    const int which = entry / kStates, state = me.quad * kStates + entry % kStates;
                    row[which * s.states_per_tile + state] = red.v[j];
                  }
                }
              }
            }
          }
          __syncthreads();

          // ---- 4. finish ----
          for (int idx = threadIdx.x; idx < items; idx += blockDim.x) {
            const ChunkItem it(idx, s.channels_per_block, K, time_fastest);
            if (it.step >= steps || !me.has_channel(p, s, it.channel)) continue;
            const int64_t d = d0 + it.channel, t = t0 + it.step;
            const int at = it.channel * kPitch + it.step;
            // The channel's parts, its threads in order (the same sums on every run).
            Acc y = 0, du = 0, ddelta = 0;
            for (int q = 0, part = it.channel * s.threads_per_channel * kPitch + it.step; q < s.threads_per_channel;
                 ++q, part += kPitch) {
              y += s_ypart[part];
              du += s_dupart[part];
              ddelta += s_ddpart[part];
            }
            if (s.state_tiles > 1) {
              const int64_t flat = (me.b * p.dim + d) * p.len + t;
              Acc* ys = static_cast<Acc*>(s.y_scratch);
              Acc* dus = static_cast<Acc*>(s.du_scratch);
              Acc* dds = static_cast<Acc*>(s.ddelta_scratch);
              if (!first_tile) {
                y += ys[flat];
                du += dus[flat];
                ddelta += dds[flat];
              }
              if (!last_tile) {
                ys[flat] = y;
                dus[flat] = du;
                dds[flat] = ddelta;
                continue;
              }
            }
            const Acc u = s_u[at], dy = s_dy[at];
            const Acc Dd = p.D ? static_cast<const Acc*>(p.D)[d] : Acc(0);
            const int64_t flat = (me.b * p.dim + d) * p.len + t;
            if (p.z.data) {
              const Acc z = load_as<In, Acc>(p.z.data, p.z.offset(me.b, d, t));
              const Acc dout = load_as<In, Acc>(gr.dout.data, gr.dout.offset(me.b, d, t));
              static_cast<In*>(gr.dz)[flat] = static_cast<In>(dout * (y + Dd * u) * silu_grad(z));
            }
            const Acc bias = p.delta_bias ? static_cast<const Acc*>(p.delta_bias)[d] : Acc(0);
            const Acc x = load_as<In, Acc>(p.delta.data, p.delta.offset(me.b, d, t)) + bias;
            const Acc draw = p.delta_softplus ? ddelta * (x > Acc(20) ? Acc(1) : fast_sigmoid(x)) : ddelta;
            static_cast<In*>(gr.du)[flat] = static_cast<In>(du + dy * Dd);
            static_cast<In*>(gr.ddelta)[flat] = static_cast<In>(draw);
            // The terms of the per-channel sums below.
            s_dD_terms[at] = dy * u;
            s_dbias_terms[at] = draw;
          }
          if (variable_BC) {
            const int n_items = 2 * K * s.states_per_tile;
            for (int idx = threadIdx.x; idx < n_items; idx += blockDim.x) {
              const int step = idx % K, entry = idx / K;  // entry = which * states_per_tile + state
              const int which = entry / s.states_per_tile, state = entry % s.states_per_tile;
              const StateInput& P = which == 0 ? p.B : p.C;
              const int64_t ng = static_cast<int64_t>(tile) * s.states_per_tile + state;
              if (!P.variable || step >= steps || ng >= p.dstate) continue;
              Acc sum = 0;
              for (int w = 0; w < kWarps; ++w) sum += s_red[(w * K + step) * 2 * s.states_per_tile + entry];
              Acc* partial = static_cast<Acc*>(which == 0 ? gr.dB_partial : gr.dC_partial);
              const int64_t row = ((me.block_in_group * p.batch + me.b) * p.groups + me.group) * p.dstate + ng;
              partial[row * p.len + t0 + step] = sum;
            }
          }
          if (last_tile) {
            __syncthreads();
            if (threadIdx.x < s.channels_per_block) {
              for (int i = 0; i < steps; ++i) {  // in order: the same sums on every run
                dD_sum += s_dD_terms[threadIdx.x * kPitch + i];
                dbias_sum += s_dbias_terms[threadIdx.x * kPitch + i];
              }
            }
          }
        }
      }
      if constexpr (kSummary) {
        store_segment_summary(p, s, me, n0, has_state, lam, decay);
      } else {
        // ---- the tile's per-(segment, batch, channel, state) sums ----
#pragma unroll
        for (int j = 0; j < kStates; ++j) {
          if (!has_state[j]) continue;
          const int64_t at = (me.partial_row(p) * p.dim + me.d) * p.dstate + n0 + j;
          static_cast<Acc*>(gr.dA_partial)[at] = dA[j];
          if (!p.B.variable) static_cast<Acc*>(gr.dB_partial)[at] = dBc[j];
          if (!p.C.variable) static_cast<Acc*>(gr.dC_partial)[at] = dCc[j];
        }
      }
    }
    if (!kSummary && threadIdx.x < s.channels_per_block && me.has_channel(p, s, threadIdx.x)) {
      const int64_t d = d0 + threadIdx.x;
      const int64_t row = me.partial_row(p) * p.dim + d;
      if (gr.dD_partial) static_cast<Acc*>(gr.dD_partial)[row] = dD_sum;
      if (gr.ddelta_bias_partial) static_cast<Acc*>(gr.ddelta_bias_partial)[row] = dbias_sum;
    }
  }
}

}  // namespace parprims::cuda
