// The fused selective-scan backward: a thread holds kStates states of one channel, as in the
// forward (with its own states per thread, Policy::kStatesPerThread). The block
// walks its rows' time backwards in chunks of K = kSelectiveScanCheckpointEvery steps:
//   1. stage: the chunk's inputs, loaded into registers while the block worked on the chunk
//      after it, go to shared memory once per (channel, step): delta (after bias and softplus),
//      u, dy = dout * silu(z), the factors of dz and d(delta) the finish needs (so that it reads
//      no input again), variable B and C;
//   2. recompute: from the checkpoint saved by the forward, each thread runs its states over
//      the chunk again, keeping the state entering each step in shared memory (registers would
//      cap the blocks per SM), and the channel's y, summed over its threads with shuffles;
//   3. walk back: the reverse affine recurrence of the state gradient
//      g_t = C_t dy_t + exp(delta_{t+1} A) g_{t+1} (the same monoid as the forward, read from
//      the end), with every input's gradient term at each step;
//   4. finish: du, d(delta), dz (from the channel's sums over its states of C h, l B and
//      da A, taken with shuffles in steps 2 and 3); per-channel sums for D and delta_bias;
//      the block's partial sums of variable dB and dC, reduced over its channels in a fixed
//      order (written over the chunk's checkpoint, which no one reads again, when
//      SelectiveScanGrads allows it).
// A chunk inside one sequence (every chunk but the row's last, without packed sequences) runs
// steps 2 and 3 without per-step sequence checks; the others check every step.
// No floating-point atomics: every partial sum has one writer, and a pass after the kernel
// (backward_sums.cuh) adds the partials in a fixed order, so gradients are bitwise reproducible.
// With time segments (common.cuh), the summary instance (kSummary) walks each segment back
// from a zero gradient with only steps 1 and 3's state gradient, and writes the gradient
// entering the segment's first step and the product of its gates; the full instance then
// starts each segment's walk from the combined carry. Per-task partial sums get a row per
// (segment, batch row).
#pragma once

#include "../engine/warp.cuh"
#include "backward_chunk.cuh"
#include "channel_reduction.cuh"
#include "common.cuh"

namespace parprims::cuda {

// kVariableBC: B and C are both variable (Mamba's case), known at compile time, so that the
// registers and per-step choices of constant B or C vanish. kThreadsPerChannel: the shape's
// threads_per_channel when known at compile time (0: read from the shape), so that the
// per-step sums over a channel's threads and over the warp's channels are straight-line code
// with no branches on the lane masks (Mamba's N = 16: 4), and the item rounds constant.
// kStepsPerItem: time steps per item of u, delta, z, dout, B, C and the input gradients: 2 (one
// access of twice the width, one address and one test for two elements) where the launch found
// them contiguous in time and aligned to pairs with an even length (steps_in_pairs,
// dispatch.cuh), in the fixed instance only; else 1.
template <class In, class Acc, bool kVariableBC, bool kSummary, int kThreadsPerChannel = 0, int kStepsPerItem = 1>
__global__ void __launch_bounds__(Policy::kThreads, Policy::kBackwardMinBlocksPerSM)
    selective_scan_backward_kernel(const SelectiveScanParams p, const SelectiveScanGrads gr,
                                   const SelectiveScanShape s) {
  using Chunk = BackwardChunk<In, Acc>;
  constexpr int K = Chunk::K, kPitch = Chunk::kPitch, R = Policy::kBackwardPrefetchRounds;
  constexpr int RS = Policy::kBackwardStatePrefetchRounds;
  // With the threads of a channel known at compile time, a whole chunk sums the parts of y,
  // l B and da A over them for kSumSteps steps at once (sum_over_channel_threads: 3 and 6
  // shuffles for 4 steps instead of 8 and 16); otherwise each step sums its own.
  constexpr int kSumSteps = kThreadsPerChannel > 1 ? kThreadsPerChannel : 0;
  // kSumSteps as a divisor: the same where the sums are taken, and never zero in the code that
  // is discarded without them (a % by a constant zero there draws a compiler warning).
  constexpr int kSumGroup = kSumSteps > 0 ? kSumSteps : 1;
  static_assert(K % kSumGroup == 0, "a chunk holds whole groups of summed steps");
  // The steps of a whole chunk unrolled together (walk_whole_chunk): in the fixed instance
  // Policy::kBackwardWalkGroup (whole groups of summed steps), else the whole chunk.
  constexpr int kWalkGroup =
      kSumSteps > 0 ? (Policy::kBackwardWalkGroup > kSumSteps ? Policy::kBackwardWalkGroup : kSumSteps) : K;
  static_assert(kWalkGroup % kSumGroup == 0 && K % kWalkGroup == 0, "whole groups of summed steps");
  constexpr bool kFixed = kThreadsPerChannel > 0;
  // The paired lane layout (ThreadPlace) in the fixed instance, whose sums over lanes take their
  // masks at compile time.
  constexpr bool kPaired = kThreadsPerChannel > 1 && kThreadsPerChannel < 32;
  constexpr int kSteps = kStepsPerItem, kColumns = K / kSteps;  // kColumns items along time per chunk row
  static_assert(kSteps == 1 || (kSteps == 2 && kFixed), "two steps an item in the fixed instance only");
  const int channels_per_block = kFixed ? Policy::kThreads / kThreadsPerChannel : s.channels_per_block;
  const int S = kFixed ? kThreadsPerChannel * kStates : s.states_per_tile;
  // With fewer than the most threads a channel, the fixed instance's one tile holds all states.
  const int state_tiles = kFixed ? 1 : s.state_tiles;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const BackwardShared<Acc> sm(smem_raw, channels_per_block, S);
  const bool B_variable = kVariableBC || p.B.variable, C_variable = kVariableBC || p.C.variable;
  const int threads_per_channel = kThreadsPerChannel > 0 ? kThreadsPerChannel : s.threads_per_channel;
  const bool variable_B = !kSummary && B_variable;  // the summary's state gradient needs no B
  const bool variable_C = C_variable;
  const bool variable_BC = B_variable || C_variable;
  const int warp = threadIdx.x >> 5;
  const Acc* A = static_cast<const Acc*>(p.A);
  const Acc* D = static_cast<const Acc*>(p.D);
  const Acc* delta_bias = static_cast<const Acc*>(p.delta_bias);
  const Acc* init = static_cast<const Acc*>(p.initial_state);
  const Acc* dlast = static_cast<const Acc*>(gr.dlast_state);
  const Acc* checkpoints = static_cast<const Acc*>(p.checkpoints);
  const In* u_in = static_cast<const In*>(p.u.data);
  const In* delta_in = static_cast<const In*>(p.delta.data);
  const In* z_in = static_cast<const In*>(p.z.data);
  const In* dout_in = static_cast<const In*>(gr.dout.data);
  // A thread's items of every chunk, as in the forward: (channel, step), time fastest when u is
  // contiguous in time; (state, step) of B and C, states fastest.
  const ItemWalk items(channels_per_block, kColumns, kSteps > 1 || p.u.len_stride == 1);
  const ItemWalk state_items(S, kColumns, false);
  const int item_rounds = kFixed ? (Policy::kThreads / kThreadsPerChannel) * kColumns / Policy::kThreads : items.rounds;
  const int state_rounds = kFixed ? kThreadsPerChannel * kStates * kColumns / Policy::kThreads : state_items.rounds;
  // A chunk's loads, held in registers while the block works on the chunk after it in time.
  using Raw = RawSteps<In, kSteps>;  // unconverted until staged (common.cuh)
  Raw next_u[R], next_delta[R], next_z[R], next_dout[R], next_B[RS], next_C[RS];

  for (int64_t block = blockIdx.x; block < s.blocks; block += gridDim.x) {
    const ThreadPlace me(p, s, block, kPaired);
    const LaneLayout lanes{threads_per_channel, kPaired};  // me.lanes, known at compile time
    const int64_t d0 = me.first_channel(p, s);
    // The channels' delta_bias and D, read from shared memory by the staging and the finish: a
    // global load there would be issued after the next chunk's loads and wait for them too
    // (settled_uniform, engine/warp.cuh, says why).
    __syncthreads();  // the previous block's finish has read them
    if (threadIdx.x < channels_per_block) {
      const bool real = me.has_channel(threadIdx.x);
      sm.delta_bias[threadIdx.x] = (real && delta_bias) ? delta_bias[d0 + threadIdx.x] : Acc(0);
      sm.D[threadIdx.x] = (real && D) ? D[d0 + threadIdx.x] : Acc(0);
    }
    // Per-channel sums over time of the D and delta_bias gradients (thread c holds channel c).
    Acc dD_sum = 0, dbias_sum = 0;
    for (int tile = 0; tile < state_tiles; ++tile) {
      const bool first_tile = tile == 0, last_tile = tile + 1 == state_tiles;
      const int state0 = me.quad * kStates;  // the thread's first state within the tile
      const int64_t tile_n0 = static_cast<int64_t>(tile) * S;
      const int64_t n0 = tile_n0 + state0;
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
        Bc[j] = (has_state[j] && !B_variable) ? static_cast<const Acc*>(p.B.data)[p.B.offset(0, 0, me.d, n, 0)] : Acc(0);
        Cc[j] = (has_state[j] && !C_variable) ? static_cast<const Acc*>(p.C.data)[p.C.offset(0, 0, me.d, n, 0)] : Acc(0);
        dA[j] = dBc[j] = dCc[j] = Acc(0);
        // The gradient entering the segment's last step: the combined carry (zero for the last
        // segment, and always in the summary).
        const Acc* carry = static_cast<const Acc*>(s.segment_state);
        lam[j] = (!kSummary && s.segments > 1 && has_state[j]) ? carry[me.segment_at(p, n0 + j)] : Acc(0);
        decay[j] = Acc(1);
      }
      // Waited for now, before the first chunk's loads are issued: the walk back reads lam
      // after every chunk's prefetch, and would wait for the prefetch there (settled_any).
#pragma unroll
      for (int j = 0; j < kStates; ++j) lam[j] = settled_any(lam[j]);
      auto state_at = [&](const Acc* base, int64_t k, int j) {
        return (base && has_state[j]) ? base[(k * p.dim + me.d) * p.dstate + n0 + j] : Acc(0);
      };
      // The steps walked: the segment; for the summary of a segment with packed sequences, up to
      // the chunk of the end of the sequence holding its first step.
      const int64_t t_end = kSummary ? backward_summary_end(p, me, K) : me.t_end;
      // Walking back, the sequence of the current step.
      int64_t seq_back = p.offsets ? sequence_of(p, t_end - 1) : me.b;
      // Whether step t ends (starts) its sequence; at an end the walk restarts from the
      // sequence's last-state gradient. Calling it twice for one step changes nothing.
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
            lam[j] = settled_any(state_at(dlast, seq_back, j));  // (see the tile's start)
            decay[j] = Acc(0);
          }
        }
      };
      auto store_dinitial = [&] {
#pragma unroll
        for (int j = 0; j < kStates; ++j) {
          if (has_state[j]) static_cast<Acc*>(gr.dinitial)[(seq_back * p.dim + me.d) * p.dstate + n0 + j] = lam[j];
        }
      };

      // The thread's walks over the inputs and the gradients, from the last chunk walked back.
      const int64_t c_first = me.t_begin / K, c_last = (t_end - 1) / K;
      const int64_t t_last = c_last * K;
      auto steps_of = [&](int64_t c) { return static_cast<int>(p.len - c * K < K ? p.len - c * K : K); };
      auto walk = [&](int64_t origin, int64_t row_stride, int64_t len_stride, const ItemWalk& w) {
        return StridedWalk(origin, row_stride, kSteps * len_stride, w, -kColumns);
      };
      StridedWalk u_walk = walk(p.u.offset(me.b, d0, t_last), p.u.dim_stride, p.u.len_stride, items);
      StridedWalk delta_walk = walk(p.delta.offset(me.b, d0, t_last), p.delta.dim_stride, p.delta.len_stride, items);
      StridedWalk z_walk = walk(p.z.offset(me.b, d0, t_last), p.z.dim_stride, p.z.len_stride, items);
      StridedWalk dout_walk = walk(gr.dout.offset(me.b, d0, t_last), gr.dout.dim_stride, gr.dout.len_stride, items);
      StridedWalk grad_walk = walk((me.b * p.dim + d0) * p.len + t_last, p.len, 1, items);  // contiguous gradients
      StridedWalk B_walk = walk(p.B.offset(me.b, me.group, 0, tile_n0, t_last), p.B.state_stride, p.B.len_stride,
                                state_items);
      StridedWalk C_walk = walk(p.C.offset(me.b, me.group, 0, tile_n0, t_last), p.C.state_stride, p.C.len_stride,
                                state_items);
      // An item inside the chunk's (channel, step) grid, and one that is in the data (with two
      // steps an item, the chunk's count of steps is even: both or neither are).
      auto in_grid = [&](int r) { return items.row(r) < channels_per_block && items.column(r) < kColumns; };
      auto item_real = [&](int r, int steps) {
        return items.row(r) < channels_per_block && items.column(r) * kSteps < steps && me.has_channel(items.row(r));
      };
      auto load_inputs = [&](int r, int steps, Raw& u, Raw& delta, Raw& z, Raw& dout) {
        const bool real = item_real(r, steps);
        u = kSummary ? Raw{} : Raw::load(u_in + u_walk.at(r), real);
        delta = Raw::load(delta_in + delta_walk.at(r), real);
        z = z_in ? Raw::load(z_in + z_walk.at(r), real) : Raw{};
        dout = Raw::load(dout_in + dout_walk.at(r), real);
      };
      auto load_state = [&](const StateInput& P, const StridedWalk& walk, int r, int steps) {
        const bool real = state_items.column(r) * kSteps < steps && tile_n0 + state_items.row(r) < p.dstate;
        return Raw::load(static_cast<const In*>(P.data) + walk.at(r), real);
      };
      // Issues the loads of the chunk the walks point at into the registers.
      auto fetch = [&](int steps) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < item_rounds) load_inputs(r, steps, next_u[r], next_delta[r], next_z[r], next_dout[r]);
        }
#pragma unroll
        for (int r = 0; r < RS; ++r) {
          if (variable_B && r < state_rounds) next_B[r] = load_state(p.B, B_walk, r, steps);
          if (variable_C && r < state_rounds) next_C[r] = load_state(p.C, C_walk, r, steps);
        }
      };
      auto advance_walks = [&] {
        for (StridedWalk* w : {&u_walk, &delta_walk, &z_walk, &dout_walk, &B_walk, &C_walk}) w->base += w->chunk_stride;
      };
      // Stages one item: everything the steps and the finish need of it, so that the finish
      // reads no input again.
      auto stage_item = [&](int r, int steps, Raw raw_u, Raw raw_delta, Raw raw_z, Raw raw_dout) {
        if (!in_grid(r)) return;
        const bool real = item_real(r, steps);
        const Acc bias = real ? sm.delta_bias[items.row(r)] : Acc(0);
#pragma unroll
        for (int k = 0; k < kSteps; ++k) {
          const Acc u = raw_u.template value<Acc>(k), delta = raw_delta.template value<Acc>(k);
          const Acc z = raw_z.template value<Acc>(k), dout = raw_dout.template value<Acc>(k);
          const int at = items.row(r) * kPitch + items.column(r) * kSteps + k;
          stage_element<Acc, kSummary>(sm, at, u, delta, z, dout, bias, p.delta_softplus, z_in != nullptr, real);
        }
      };
      auto stage_state = [&](Acc* dst, int r, Raw v) {
        if (state_items.column(r) >= kColumns) return;  // past the grid (N <= 2)
#pragma unroll
        for (int k = 0; k < kSteps; ++k) {
          dst[(state_items.column(r) * kSteps + k) * S + state_items.row(r)] = v.template value<Acc>(k);
        }
      };
      auto stage = [&](int steps) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < item_rounds) stage_item(r, steps, next_u[r], next_delta[r], next_z[r], next_dout[r]);
        }
#pragma unroll
        for (int r = 0; r < RS; ++r) {
          if (variable_B && r < state_rounds) stage_state(sm.B, r, next_B[r]);
          if (variable_C && r < state_rounds) stage_state(sm.C, r, next_C[r]);
        }
        // Rounds beyond the registers (N <= 8, or N > 32) load now.
        for (int r = R; r < item_rounds; ++r) {
          Raw u, delta, z, dout;
          load_inputs(r, steps, u, delta, z, dout);
          stage_item(r, steps, u, delta, z, dout);
        }
        for (int r = RS; variable_B && r < state_rounds; ++r) stage_state(sm.B, r, load_state(p.B, B_walk, r, steps));
        for (int r = RS; variable_C && r < state_rounds; ++r) stage_state(sm.C, r, load_state(p.C, C_walk, r, steps));
      };
      // The step's B and C for the thread's states.
      auto states_at = [&](int i, Acc (&Bt)[kStates], Acc (&Ct)[kStates]) {
        if (variable_B) {
          load_states<Acc, kStates>(sm.B + i * S + state0, Bt);
        } else {
#pragma unroll
          for (int j = 0; j < kStates; ++j) Bt[j] = Bc[j];
        }
        if (variable_C) {
          load_states<Acc, kStates>(sm.C + i * S + state0, Ct);
        } else {
#pragma unroll
          for (int j = 0; j < kStates; ++j) Ct[j] = Cc[j];
        }
      };
      // The sums of v and w over the channel's threads, in every one of them (the same order on
      // every run).
      auto channel_sums = [&](Acc& v, Acc& w) {
#pragma unroll
        for (int mask = 16; mask > 0; mask >>= 1) {
          if (mask < threads_per_channel) {
            v += __shfl_xor_sync(0xffffffffu, v, lanes.mask(mask));
            w += __shfl_xor_sync(0xffffffffu, w, lanes.mask(mask));
          }
        }
      };
      Acc* entering_of_thread = sm.entering + threadIdx.x * kStates;
      const int channel_step0 = me.channel * kPitch;
      // The rows of the block's partial sums of variable dB and dC for the tile's first state:
      // (channel_blocks per group, batch, G, N, L) (unless they go over the checkpoints).
      const int64_t partial_row = ((me.block_in_group * p.batch + me.b) * p.groups + me.group) * p.dstate + tile_n0;
      Acc* dB_rows = (B_variable && gr.dB_partial) ? static_cast<Acc*>(gr.dB_partial) + partial_row * p.len : nullptr;
      Acc* dC_rows = (C_variable && gr.dC_partial) ? static_cast<Acc*>(gr.dC_partial) + partial_row * p.len : nullptr;
      // Where this lane stores the channel sums of dB and dC of each step (the summary sums nothing).
      const WarpSumRows<Acc> sum_rows(lanes, !kSummary && variable_BC, warp, S, state0, kPitch);

      // A chunk's checkpoint (the states entering its first step), loaded with the chunk's other
      // inputs while the block works on the chunk after it in time. Loaded at the chunk's start,
      // it was still in flight at the recompute's first step and, through the scoreboard its load
      // shared with the prefetched inputs, at the staging's first conversion (ncu, H100: 10 % of
      // the stall samples). Chunk c - 1's slots take no dB/dC partials before chunk c - 1 ends.
      Acc next_checkpoint[kStates];
      auto fetch_checkpoint = [&](int64_t c) {
#pragma unroll
        for (int j = 0; j < kStates; ++j) {
          next_checkpoint[j] = (!kSummary && has_state[j])
                                   ? checkpoints[((me.b * p.dim + me.d) * p.checkpoint_chunks + c) * p.dstate + n0 + j]
                                   : Acc(0);
        }
      };

      fetch(steps_of(c_last));
      fetch_checkpoint(c_last);
      for (int64_t c = c_last; c >= c_first; --c) {
        const int64_t t0 = c * K;
        const int steps = steps_of(c);
        // A whole chunk inside one sequence (the common case) runs its steps without per-step
        // sequence checks: a sequence ending at its last step restarts the walk here, and one
        // starting at its first step gets its initial-state gradient after the walk. (Decided
        // before the next chunk's loads are issued, so that its reads wait for no prefetch.)
        bool whole = steps == K, chunk_starts = false;
        if (whole) {
          bool ends, starts;
          step_bounds(t0 + K - 1, ends, starts);
          const int64_t sequence_start = p.offsets ? p.seq_offset(seq_back) : 0;
          whole = sequence_start <= t0;
          chunk_starts = sequence_start == t0;
        }
        Acc checkpoint[kStates];
#pragma unroll
        for (int j = 0; j < kStates; ++j) checkpoint[j] = next_checkpoint[j];
        __syncthreads();  // the previous chunk's finish has read the shared arrays
        // ---- 1. stage ----
        stage(steps);
        __syncthreads();
        // The previous chunk's loads are in flight while this one's steps run.
        advance_walks();
        if (c > c_first) {
          fetch(steps_of(c - 1));
          fetch_checkpoint(c - 1);
        }

        // Runs `step` over the chunk's steps from the last: a whole chunk unrolled with no checks;
        // a chunk with a sequence boundary (or the row's last, partial one) one step at a time
        // with the checks, rolled up so that the unrolled fast path alone fills the instruction
        // cache. At a sequence start the full pass stores the initial state's gradient.
        // `step(i, place)`: place is WholeChunkStep<i % kWalkGroup> on the fast path, else CheckedStep.
        // (Without sums by groups of steps, no step reads its place: the chunk is unrolled whole,
        // and the step's body is compiled once, not once a place.)
        auto walk_chunk_back = [&](auto&& step) {
          if (whole) {
            if constexpr (kSumSteps > 0) {
              walk_whole_chunk<K, kWalkGroup, false>(step);
            } else {
#pragma unroll
              for (int i = K - 1; i >= 0; --i) step(i, WholeChunkStep<0>{});
            }
          } else {
#pragma unroll 1
            for (int i = steps - 1; i >= 0; --i) {
              bool ends, starts;
              step_bounds(t0 + i, ends, starts);
              step(i, CheckedStep{});
              if (!kSummary && starts && gr.dinitial) store_dinitial();
            }
          }
        };
        if constexpr (kSummary) {
          // ---- the state gradient alone, back over the chunk ----
          auto summary_step = [&](int i, auto /*place*/) {
            const Acc dl = sm.delta[channel_step0 + i];
            const Acc dy = sm.dy[channel_step0 + i];
            Acc Bt[kStates], Ct[kStates];
            states_at(i, Bt, Ct);
#pragma unroll
            for (int j = 0; j < kStates; ++j) {
              const Acc a = Gate<Acc>::exp_scaled(dl * A2[j]);
              lam[j] = a * (lam[j] + Ct[j] * dy);
              decay[j] *= a;
            }
          };
          walk_chunk_back(summary_step);
        } else {
          // ---- 2. recompute the chunk's states from its checkpoint ----
          Acc h[kStates];
#pragma unroll
          for (int j = 0; j < kStates; ++j) h[j] = checkpoint[j];
          // Returns the thread's part of the step's y.
          auto recompute_step = [&](int i) {
            const Acc dl = sm.delta[channel_step0 + i];
            const Acc dlu = dl * sm.u[channel_step0 + i];
            Acc Bt[kStates], Ct[kStates];
            states_at(i, Bt, Ct);
            store_states<Acc, kStates>(entering_of_thread + i * Policy::kThreads * kStates, h);
            Acc y = 0;
#pragma unroll
            for (int j = 0; j < kStates; ++j) {
              h[j] = Gate<Acc>::exp_scaled(dl * A2[j]) * h[j] + dlu * Bt[j];
              y += Ct[j] * h[j];
            }
            return y;
          };
          auto store_y = [&](int i, Acc y) {
            Acc unused = 0;
            channel_sums(y, unused);
            if (me.quad == 0) sm.y[channel_step0 + i] = y;
          };
          if (whole) {
            if constexpr (kSumSteps > 0) {
              Acc y[kSumSteps];
              walk_whole_chunk<K, kWalkGroup, true>([&](int i, auto place) {
                constexpr int q = decltype(place)::position % kSumSteps;
                y[q] = recompute_step(i);
                if constexpr (q == kSumSteps - 1) {  // the channel's thread q gets the group's step q
                  sum_over_channel_threads<kSumSteps, kPaired>(y);
                  sm.y[channel_step0 + i + 1 - kSumSteps + me.quad] = y[0];
                }
              });
            } else {
#pragma unroll
              for (int i = 0; i < K; ++i) store_y(i, recompute_step(i));
            }
          } else {
            int64_t seq = p.offsets ? sequence_of(p, t0) : me.b;
#pragma unroll 1
            for (int i = 0; i < steps; ++i) {
              const int64_t t = t0 + i;
              if (p.offsets && i > 0) {
                while (seq + 1 < p.num_seqs && t >= p.seq_offset(seq + 1)) {  // a sequence starts
                  ++seq;
#pragma unroll
                  for (int j = 0; j < kStates; ++j) h[j] = state_at(init, seq, j);
                }
              }
              store_y(i, recompute_step(i));
            }
          }

          // ---- 3. walk back ----
          // dC needs the state after each step. Inside a whole chunk that is the state entering
          // the next step, which the walk back has just read (and, for the last step, the
          // recompute's last state), so it is carried instead of recomputed; across a sequence
          // start inside the chunk it is not, and the step recomputes it.
          Acc h_after[kStates];
#pragma unroll
          for (int j = 0; j < kStates; ++j) h_after[j] = h[j];
          Acc sum_parts[2 * kSumGroup];  // the parts of l B, then of da A, of a group's steps
          auto walk_back_step = [&](int i, auto place) {
            constexpr bool in_whole_chunk = decltype(place)::value;
            const Acc dl = sm.delta[channel_step0 + i];
            const Acc u = sm.u[channel_step0 + i];
            const Acc dy = sm.dy[channel_step0 + i];
            const Acc dlu = dl * u;
            Acc Bt[kStates], Ct[kStates], h_entering[kStates];
            states_at(i, Bt, Ct);
            load_states<Acc, kStates>(entering_of_thread + i * Policy::kThreads * kStates, h_entering);
            // The thread's parts of the step's sums over states that du and d(delta) take
            // (finish_items multiplies them by delta and u once per (channel, step)).
            Acc lB_part = 0, daA_part = 0;
            ChannelReduction<Acc> red;
#pragma unroll
            for (int j = 0; j < kStates; ++j) {
              const Acc a = Gate<Acc>::exp_scaled(dl * A2[j]);
              const Acc hp = h_entering[j];
              const Acc l = lam[j] + Ct[j] * dy;
              const Acc dB = l * dlu;
              const Acc dC = dy * (in_whole_chunk ? h_after[j] : a * hp + dlu * Bt[j]);
              lam[j] = a * l;
              const Acc da = lam[j] * hp;  // l * a * hp
              lB_part += l * Bt[j];
              daA_part += da * Araw[j];
              dA[j] += da * dl;
              h_after[j] = hp;
              red.v[j] = dB;
              red.v[kStates + j] = dC;
              if (!B_variable) dBc[j] += dB;
              if (!C_variable) dCc[j] += dC;
            }
            if constexpr (in_whole_chunk && kSumSteps > 0) {
              constexpr int q = decltype(place)::position % kSumGroup;
              sum_parts[q] = lB_part;
              sum_parts[kSumSteps + q] = daA_part;
              if constexpr (q == 0) {  // the group's first step: every step of it is in
                // The channel's thread q gets entries 2q and 2q + 1: the first half of its
                // threads the sums of l B of two consecutive steps each, the other half of da A.
                sum_over_channel_threads<kSumSteps, kPaired>(sum_parts);
                const int entry = 2 * me.quad;
                Acc* sums = entry < kSumSteps ? sm.lB : sm.daA;
                const int at = channel_step0 + i + entry % kSumGroup;
                sums[at] = sum_parts[0];
                sums[at + 1] = sum_parts[1];
              }
            } else {
              channel_sums(lB_part, daA_part);
              if (me.quad == 0) {
                sm.lB[channel_step0 + i] = lB_part;
                sm.daA[channel_step0 + i] = daA_part;
              }
            }
            if (variable_BC) {
              red.run(lanes);
              sum_rows.store(sm.red, i, red);
            }
          };
          walk_chunk_back(walk_back_step);
          __syncthreads();

          // ---- 4. finish ----
          finish_items<In, Acc, kSteps>(sm, gr, s, items, item_rounds, item_real, steps, grad_walk, z_in != nullptr,
                                        state_tiles, first_tile, last_tile);
          grad_walk.base += grad_walk.chunk_stride;
          if (variable_BC) {
            store_BC_partials<Acc, kFixed ? kThreadsPerChannel * kStates : 0>(
                sm, p, gr, me.b, d0, c, S, steps, t0, tile_n0, B_variable, C_variable, dB_rows, dC_rows);
          }

          if (last_tile) {
            __syncthreads();
            if (threadIdx.x < channels_per_block) {
              for (int i = 0; i < steps; ++i) {  // in order: the same sums on every run
                dD_sum += sm.dD_terms[threadIdx.x * kPitch + i];
                dbias_sum += sm.dbias_terms[threadIdx.x * kPitch + i];
              }
            }
          }
        }
        if (whole && chunk_starts && gr.dinitial && !kSummary) store_dinitial();
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
          if (!B_variable) static_cast<Acc*>(gr.dB_partial)[at] = dBc[j];
          if (!C_variable) static_cast<Acc*>(gr.dC_partial)[at] = dCc[j];
        }
      }
    }
    if (!kSummary && threadIdx.x < channels_per_block && me.has_channel(threadIdx.x)) {
      const int64_t d = d0 + threadIdx.x;
      const int64_t row = me.partial_row(p) * p.dim + d;
      if (gr.dD_partial) static_cast<Acc*>(gr.dD_partial)[row] = dD_sum;
      if (gr.ddelta_bias_partial) static_cast<Acc*>(gr.ddelta_bias_partial)[row] = dbias_sum;
    }
  }
}

}  // namespace parprims::cuda
