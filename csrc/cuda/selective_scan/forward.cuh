// The fused selective-scan forward. A block owns channels_per_block channels of one batch row
// (one group of B/C) for the whole sequence; each thread keeps S states of one channel
// in registers and walks time sequentially (the affine recurrence h = a*h + b, one update per
// step: the least work per state and no cross-thread scan). Per chunk of K steps:
//   1. stage: the chunk's inputs, loaded into registers while the block worked on the previous
//      chunk, go to shared memory once per (channel, step) as the step loop wants them:
//      (delta, delta*u) pairs with delta = softplus(delta + bias), D*u, silu(z), and (B, C)
//      side by side;
//   2. steps: every thread updates its S states, 16 steps unrolled at a time (vector loads of
//      its states' B and C, one exp2 and three FMAs per state and step); the instance for
//      Mamba's N = 16 sums y's parts over the channel's threads by shuffles (as many steps at a
//      time as a channel has threads) and stores one sum per (channel, step), the general
//      instance stores every thread's part;
//   3. finish: the block sums the parts (general instance) and writes
//      out = (y + D*u) * silu(z), coalesced.
// The per-element work of 1 and 3 is shared by the threads_per_channel threads of a channel,
// so it is kept lean: a thread's items sit at fixed places of every chunk (ItemWalk), so their
// addresses advance by a constant, and the float functions use the special-function unit.
// The states entering every kSelectiveScanCheckpointEvery-th step are saved for the backward
// when asked. Nothing of size (batch, dim, N, L) is ever written.
// With time segments (common.cuh), the summary instance (kSummary) walks each segment from
// zero without y (it stages neither C nor the finish's operands), and writes the segment's end
// state and the product of its gates; the full instance then starts each segment from the
// combined carry. At N = 16 the full pass of rows that fill the GPU and of packed rows runs
// warp-specialized instead (forward_specialized.cuh); in a packed row it then folds the carries
// itself, beside the summary (time_segments.cuh), and the summary flags each task it stored.
#pragma once

#include "../engine/dependent_launch.cuh"
#include "channel_reduction.cuh"
#include "common.cuh"
#include "time_segments.cuh"

namespace parprims::cuda {

// The step loop's per-(channel, step) operands, read together in one load.
template <class Acc>
struct __align__(2 * sizeof(Acc)) DeltaPair {
  Acc delta, delta_u;
};

// A channel's constants for the staging of its items (zero for a channel past the data).
template <class Acc>
struct __align__(2 * sizeof(Acc)) ChannelConstants {
  Acc delta_bias, D;
};

template <class In, class Acc>
struct ForwardChunk {
  static constexpr int K = Policy::kForwardChunk;
  static constexpr int kSub = kSelectiveScanCheckpointEvery;  // steps unrolled at a time
  static constexpr int kPitch = K + 1;  // rows padded: the lanes of a warp hit distinct banks
  static_assert(K % kSub == 0, "chunks hold whole checkpoint intervals");
  static_assert(Policy::kThreads % K == 0, "a round of items covers whole chunk rows");

  // In Acc: (delta, delta*u) pairs, D*u and silu(z) by [channel][step]; y by [channel][step]
  // when the step loop sums it over the channel's threads (`y_summed`: the fixed instance), else
  // its parts by [thread][step]; variable B and C side by side, (B, C) by [step][state], from
  // an offset aligned to four values (bc_offset); the channels' constants.
  static size_t smem_bytes(const SelectiveScanShape& s, bool variable_B, bool variable_C, bool y_summed) {
    const size_t per_state = (variable_B || variable_C) ? 2 * static_cast<size_t>(K) * s.states_per_tile : 0;
    const size_t constants = 2 * static_cast<size_t>(s.channels_per_block);
    return (bc_offset(s.channels_per_block, y_summed) + per_state + constants) * sizeof(Acc);
  }
  // Where the (B, C) rows start, in values: after the per-channel rows (a pair is two values) and
  // y's rows, rounded up so that a thread's (B, C) of its states is one aligned vector load.
  static __host__ __device__ size_t bc_offset(int channels_per_block, bool y_summed) {
    const size_t per_channel = 4 * static_cast<size_t>(channels_per_block) * kPitch;
    const size_t y_rows = static_cast<size_t>(y_summed ? channels_per_block : Policy::kThreads) * kPitch;
    return (per_channel + y_rows + 3) / 4 * 4;
  }
};

// kThreadsPerChannel: the shape's threads_per_channel when known at compile time (0: read from
// the shape). The instance for Mamba's N = 16 (4 threads a channel) then has constant item
// rounds, step addresses and a straight-line sum of y's parts over the channel's threads.
// kStepsPerItem: time steps per item of u, delta, z, out, B and C: 2 (one load of twice the
// width, and one address and one test for two elements) where the launch found them contiguous
// in time and aligned to pairs with an even length (steps_in_pairs, dispatch.cuh), in the fixed
// instance only; else 1.
template <class In, class Acc, bool kVariableBC, bool kSummary, int kThreadsPerChannel = 0, int kStepsPerItem = 1>
__global__ void __launch_bounds__(Policy::kThreads, Policy::kForwardMinBlocksPerSM)
    selective_scan_forward_kernel(const SelectiveScanParams p, const SelectiveScanShape s, const SegmentPlan plan) {
  constexpr int S = Policy::kForwardStatesPerThread;  // states per thread
  using Chunk = ForwardChunk<In, Acc>;
  constexpr int K = Chunk::K, kSub = Chunk::kSub, kPitch = Chunk::kPitch, R = Policy::kPrefetchRounds;
  constexpr bool kFixed = kThreadsPerChannel > 0;
  // What ThreadPlace's paired layout (asked for below) is in the fixed instance.
  constexpr bool kPairedFixed = kThreadsPerChannel > 1 && kThreadsPerChannel < 32;
  // The fixed instance sums y over the channel's threads in the step loop, kSumSteps steps at
  // once in whole intervals (sum_over_channel_threads: 2 + 1 shuffles for 4 steps at four
  // threads a channel) and each step alone elsewhere (a butterfly); its finish reads one sum per
  // (channel, step). The general instance stores every thread's part per step and its finish
  // sums them: with up to 32 threads a channel, a butterfly per step would cost it log2(32)
  // shuffles and adds a step.
  constexpr bool kYSummed = kFixed;
  constexpr int kSumSteps = kFixed && kThreadsPerChannel > 1 ? kThreadsPerChannel : 0;
  const int threads_per_channel = kFixed ? kThreadsPerChannel : s.threads_per_channel;
  const int channels_per_block = kFixed ? Policy::kThreads / kThreadsPerChannel : s.channels_per_block;
  const int states_per_tile = kFixed ? kThreadsPerChannel * S : s.states_per_tile;
  constexpr int kSteps = kStepsPerItem;
  static_assert(kSteps == 1 || (kSteps == 2 && kFixed), "two steps an item in the fixed instance only");
  constexpr int kColumns = K / kSteps;  // items along time per chunk row
  constexpr int kItemRounds = kFixed ? (Policy::kThreads / kThreadsPerChannel) * kColumns / Policy::kThreads : 0;
  // With fewer than the most threads a channel, the shape's one tile holds all the states.
  const int state_tiles = kFixed && kThreadsPerChannel < Policy::kMaxThreadsPerChannel ? 1 : s.state_tiles;
  const bool variable_B = kVariableBC || p.B.variable;
  const bool variable_C = !kSummary && (kVariableBC || p.C.variable);  // the summary needs no y
  // Values a (step, state) of s_BC holds: (B, C) side by side, or B alone in the summary of the
  // instance with both variable (half the shared loads of its steps).
  constexpr int kBCWidth = kVariableBC && kSummary ? 1 : 2;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int channel_rows = channels_per_block * kPitch;
  auto* s_pair = reinterpret_cast<DeltaPair<Acc>*>(smem_raw);
  Acc* s_skip = reinterpret_cast<Acc*>(s_pair + channel_rows);  // D*u
  Acc* s_gate = s_skip + channel_rows;                           // silu(z), or 1
  Acc* s_y = s_gate + channel_rows;  // y (kYSummed) or its parts, this state tile's
  // (B, C) of a step's state side by side (B alone where kBCWidth is 1): a thread's S states of
  // a step are 16-byte loads of kBCWidth * S values (with two states a thread, a warp's B and C
  // took one shared-memory wavefront where they were two).
  Acc* s_BC = reinterpret_cast<Acc*>(smem_raw) + Chunk::bc_offset(channels_per_block, kYSummed);
  const bool variable_BC = variable_B || variable_C;
  auto* s_channel = reinterpret_cast<ChannelConstants<Acc>*>(s_BC + (variable_BC ? 2 * K * states_per_tile : 0));
  const Acc* A = static_cast<const Acc*>(p.A);
  const Acc* init = static_cast<const Acc*>(p.initial_state);
  Acc* last = static_cast<Acc*>(p.last_state);
  Acc* y_scratch = static_cast<Acc*>(s.y_scratch);
  const In* u_in = static_cast<const In*>(p.u.data);
  const In* delta_in = static_cast<const In*>(p.delta.data);
  const In* z_in = kSummary ? nullptr : static_cast<const In*>(p.z.data);
  In* out = static_cast<In*>(const_cast<void*>(p.out.data));
  const Acc* D = static_cast<const Acc*>(p.D);
  const Acc* delta_bias = static_cast<const Acc*>(p.delta_bias);
  // Items: (channel, step) of the chunk, time fastest when u is contiguous in time; and
  // (state, step) of B and C, states fastest, whatever their layout: their shared rows are
  // then written without bank conflicts. (Measured on the H200 at (8, 1536, 2048, 16): 0.60 ms
  // this way, 0.74 ms with time-fastest loads into rows padded against conflicts.)
  const ItemWalk items(channels_per_block, kColumns, kSteps > 1 || p.u.len_stride == 1);
  const ItemWalk state_items(states_per_tile, kColumns, false);  // B's and C's alike
  // A chunk's loads, held in registers from the end of one chunk's staging to the next's,
  // unconverted (RawSteps).
  using Raw = RawSteps<In, kSteps>;
  Raw next_u[R], next_delta[R], next_z[R], next_B[R], next_C[R];
  // A full pass that folds carries (time_segments.cuh) may start beside the summary.
  if constexpr (kSummary) allow_dependent_launch();

  for (int64_t block = blockIdx.x; block < s.blocks; block += gridDim.x) {
    const ThreadPlace me = place_of_block(p, s, plan, block, kSummary);
    // An empty segment of a planned row (two cuts at one sequence start, segment_bound) has no
    // step to walk and no sequence end to store; its summary walks no step and gives the identity.
    if (!kSummary && me.t_begin == me.t_end) continue;
    // The lanes of a channel's threads, at compile time in the fixed instance.
    const LaneLayout lanes = kFixed ? LaneLayout{kThreadsPerChannel, kPairedFixed} : me.lanes;
    // The thread's row of y: its channel's sums (kYSummed), or its own parts.
    const int y_row = (kYSummed ? me.channel : me.channel * threads_per_channel + me.quad) * kPitch;
    const int64_t d0 = me.first_channel(p, s);
    // The channels' constants, once per block (visible after the first chunk's barrier; the
    // previous block's last reads were before its last staging barrier).
    for (int c = threadIdx.x; c < channels_per_block; c += Policy::kThreads) {
      const bool here = me.has_channel(c);
      s_channel[c] = ChannelConstants<Acc>{(here && delta_bias) ? delta_bias[d0 + c] : Acc(0),
                                           (here && D) ? D[d0 + c] : Acc(0)};
    }
    for (int tile = 0; tile < state_tiles; ++tile) {
      const bool last_tile = tile + 1 == state_tiles;
      const int state0 = me.quad * S;  // the thread's first state within the tile
      const int64_t n0 = static_cast<int64_t>(tile) * states_per_tile + state0;
      const int64_t tile_n0 = static_cast<int64_t>(tile) * states_per_tile;
      // ---- the thread's states: gates, constant B/C, initial values ----
      Acc A2[S], Bc[S], Cc[S], h[S];
      // The summary's product of a state's gates over the segment, exp(A sum(delta)), from the
      // channel's sum of delta (one add a step where a product was one multiply a state), or
      // zero once a sequence restarts the walk.
      Acc delta_sum = 0;
      bool restarted = false;
      bool has_state[S];
#pragma unroll
      for (int j = 0; j < S; ++j) {
        const int64_t n = n0 + j;
        has_state[j] = me.active && n < p.dstate;
        A2[j] = has_state[j] ? A[me.d * p.dstate + n] * Gate<Acc>::kScale : Acc(0);
        Bc[j] = (has_state[j] && !variable_B) ? static_cast<const Acc*>(p.B.data)[p.B.offset(0, 0, me.d, n, 0)] : Acc(0);
        Cc[j] = (has_state[j] && !variable_C) ? static_cast<const Acc*>(p.C.data)[p.C.offset(0, 0, me.d, n, 0)] : Acc(0);
      }
      // The steps walked: the segment; for the summary of a segment with packed sequences, from
      // the chunk of the last sequence start inside it (earlier steps do not reach its end state),
      // or none (planned_summary_begin).
      const int64_t t_begin = kSummary ? planned_summary_begin(p, me.t_begin, me.t_end, K) : me.t_begin;
      const int64_t t_end = me.t_end;
      // The sequence of the first step walked (the first sequence at t = 0: empty ones there are
      // ended below like any other).
      int64_t seq = p.offsets ? (t_begin == 0 ? 0 : sequence_of(p, t_begin)) : me.b;
      int64_t seq_end = sequence_end(p, seq);
      auto load_initial = [&](int64_t k) {
#pragma unroll
        for (int j = 0; j < S; ++j) {
          h[j] = (init && has_state[j]) ? init[(k * p.dim + me.d) * p.dstate + n0 + j] : Acc(0);
        }
        restarted = true;
      };
      auto save_last = [&](int64_t k) {
#pragma unroll
        for (int j = 0; j < S; ++j) {
          if (has_state[j]) last[(k * p.dim + me.d) * p.dstate + n0 + j] = h[j];
        }
      };
      // Checkpoints rows are aligned to S values when N is a multiple of S: one vector store.
      const bool vector_checkpoints = p.dstate % S == 0 && me.active && n0 < p.dstate;
      // The thread's checkpoint row (its first states at the row's first checkpoint), computed
      // once: a step interval adds its checkpoint's offset.
      Acc* const checkpoint_row =
          p.checkpoints ? static_cast<Acc*>(p.checkpoints) + (me.b * p.dim + me.d) * p.checkpoint_chunks * p.dstate + n0
                        : nullptr;
      auto save_checkpoint = [&](int64_t t) {
        Acc* ck = checkpoint_row + (t / kSelectiveScanCheckpointEvery) * p.dstate;
        if (vector_checkpoints) {
          store_states(ck, h);
          return;
        }
#pragma unroll
        for (int j = 0; j < S; ++j) {
          if (has_state[j]) ck[j] = h[j];
        }
      };

      // The thread's walks over the inputs, from the first chunk walked.
      StridedWalk u_walk(p.u.offset(me.b, d0, t_begin), p.u.dim_stride, kSteps * p.u.len_stride, items, kColumns);
      StridedWalk delta_walk(p.delta.offset(me.b, d0, t_begin), p.delta.dim_stride, kSteps * p.delta.len_stride, items,
                             kColumns);
      StridedWalk z_walk(p.z.offset(me.b, d0, t_begin), p.z.dim_stride, kSteps * p.z.len_stride, items, kColumns);
      StridedWalk out_walk(p.out.offset(me.b, d0, t_begin), p.out.dim_stride, kSteps * p.out.len_stride, items,
                           kColumns);
      StridedWalk B_walk(p.B.offset(me.b, me.group, 0, tile_n0, t_begin), p.B.state_stride, kSteps * p.B.len_stride,
                         state_items, kColumns);
      StridedWalk C_walk(p.C.offset(me.b, me.group, 0, tile_n0, t_begin), p.C.state_stride, kSteps * p.C.len_stride,
                         state_items, kColumns);
      // Whether an item is in the data (its steps within the chunk's, its channel or state one
      // that exists; with two steps an item, the chunk's count of steps is even).
      auto item_real = [&](int r, int steps) {
        return items.column(r) * kSteps < steps && me.has_channel(items.row(r));
      };
      auto state_real = [&](const ItemWalk& w, int r, int steps) {
        return w.column(r) * kSteps < steps && tile_n0 + w.row(r) < p.dstate;
      };
      auto load_inputs = [&](int r, int steps, Raw& u, Raw& delta, Raw& z) {
        const bool real = item_real(r, steps);
        u = Raw::load(u_in + u_walk.at(r), real);
        delta = Raw::load(delta_in + delta_walk.at(r), real);
        z = z_in ? Raw::load(z_in + z_walk.at(r), real) : Raw{};
      };
      auto load_state = [&](const StateInput& P, const ItemWalk& w, const StridedWalk& walk, int r, int steps) {
        return Raw::load(static_cast<const In*>(P.data) + walk.at(r), state_real(w, r, steps));
      };
      // Issues the loads of the chunk the walks point at into the registers.
      auto fetch = [&](int steps) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < items.rounds) load_inputs(r, steps, next_u[r], next_delta[r], next_z[r]);
          if (variable_B && r < state_items.rounds) next_B[r] = load_state(p.B, state_items, B_walk, r, steps);
          if (variable_C && r < state_items.rounds) next_C[r] = load_state(p.C, state_items, C_walk, r, steps);
        }
      };
      auto advance_walks = [&] {
        for (StridedWalk* w : {&u_walk, &delta_walk, &z_walk, &B_walk, &C_walk}) w->base += w->chunk_stride;
      };
      // One step of the thread's states: h = exp(delta A) h + delta u B; returns its part of y.
      auto step = [&](int i) {
        const DeltaPair<Acc> dd = s_pair[me.channel * kPitch + i];
        Acc BC[kBCWidth * S];
        if (variable_BC) load_states<Acc, kBCWidth * S>(s_BC + kBCWidth * (i * states_per_tile + state0), BC);
        Acc y = 0;
#pragma unroll
        for (int j = 0; j < S; ++j) {
          const Acc b = variable_B ? BC[kBCWidth * j] : Bc[j];
          const Acc c = (kBCWidth == 2 && variable_C) ? BC[kBCWidth * j + kBCWidth - 1] : Cc[j];
          const Acc a = Gate<Acc>::exp_scaled(dd.delta * A2[j]);
          h[j] = a * h[j] + dd.delta_u * b;
          if constexpr (!kSummary) y += c * h[j];
        }
        if constexpr (kSummary) delta_sum += dd.delta;
        return y;
      };
      // A step whose y is stored alone: summed over the channel's threads by a butterfly and
      // stored by its first thread (kYSummed), or the thread's part stored.
      auto step_and_store = [&](int i) {
        Acc y = step(i);
        if constexpr (kSummary) return;
        if constexpr (kYSummed) {
#pragma unroll
          for (int mask = 16; mask > 0; mask >>= 1) {
            if (mask < threads_per_channel) y += __shfl_xor_sync(0xffffffffu, y, lanes.mask(mask));
          }
          if (me.quad == 0) s_y[y_row + i] = y;
        } else {
          s_y[y_row + i] = y;
        }
      };
      // A segment that starts a row or a sequence starts from its initial state; the others
      // from zero in the summary (their gates' product carries the carry) and from the
      // combined carry in the full pass.
      const bool starts_fresh = t_begin == 0 || (p.offsets && p.seq_offset(seq) == t_begin);
      if (starts_fresh) {
        load_initial(seq);
      } else {
#pragma unroll
        for (int j = 0; j < S; ++j) {
          const Acc* carry = static_cast<const Acc*>(s.segment_state);
          h[j] = (!kSummary && has_state[j]) ? carry[me.segment_at(p, n0 + j)] : Acc(0);
        }
      }
      fetch(static_cast<int>(t_end - t_begin < K ? t_end - t_begin : K));

      for (int64_t c0 = t_begin; c0 < t_end; c0 += K) {
        const int steps = static_cast<int>(t_end - c0 < K ? t_end - c0 : K);
        __syncthreads();  // the previous chunk's finish has read the shared arrays
        // ---- 1. stage ----
        auto stage_item = [&](int r, Raw raw_u, Raw raw_delta, Raw raw_z) {
          const int channel = items.row(r);
          const bool real = item_real(r, steps);
          const ChannelConstants<Acc> constants = s_channel[channel];
#pragma unroll
          for (int k = 0; k < kSteps; ++k) {
            const Acc u = raw_u.template value<Acc>(k), delta = raw_delta.template value<Acc>(k);
            const Acc z = raw_z.template value<Acc>(k);
            const int at = channel * kPitch + items.column(r) * kSteps + k;
            // Zero past the data by a multiply: `real ? f : 0` compiled to a branch around f with a
            // convergence barrier per element. (Items past the data were loaded as zeros: f is finite.)
            const Acc dl = fast_processed_delta(delta, constants.delta_bias, p.delta_softplus) * (real ? Acc(1) : Acc(0));
            s_pair[at] = DeltaPair<Acc>{dl, dl * u};
            if constexpr (!kSummary) {  // the finish's operands
              s_skip[at] = (real && D) ? constants.D * u : Acc(0);
              s_gate[at] = z_in ? fast_silu(z) : Acc(1);
            }
          }
        };
        // A thread's items of B and of C are the same (state, step) places: it stores both side
        // by side.
        auto stage_states = [&](int r, Raw b, Raw c) {
          if (state_items.column(r) >= kColumns) return;  // past the grid (N <= 2)
#pragma unroll
          for (int k = 0; k < kSteps; ++k) {
            Acc* at = s_BC + kBCWidth * ((state_items.column(r) * kSteps + k) * states_per_tile + state_items.row(r));
            if (variable_B && variable_C) {
              store_states<Acc, 2>(at, {b.template value<Acc>(k), c.template value<Acc>(k)});
            } else if (variable_B) {
              at[0] = b.template value<Acc>(k);
            } else if (variable_C) {
              at[1] = c.template value<Acc>(k);
            }
          }
        };
#pragma unroll
        for (int r = 0; r < R; ++r) {
          if (r < items.rounds) stage_item(r, next_u[r], next_delta[r], next_z[r]);
          if (variable_BC && r < state_items.rounds) stage_states(r, next_B[r], next_C[r]);
        }
        // Rounds beyond the registers (N <= 8, or N > 32) load now.
        for (int r = R; r < items.rounds; ++r) {
          Raw u, delta, z;
          load_inputs(r, steps, u, delta, z);
          stage_item(r, u, delta, z);
        }
        for (int r = R; variable_BC && r < state_items.rounds; ++r) {
          stage_states(r, variable_B ? load_state(p.B, state_items, B_walk, r, steps) : Raw{},
                       variable_C ? load_state(p.C, state_items, C_walk, r, steps) : Raw{});
        }
        __syncthreads();
        // The next chunk's loads are in flight while this one's steps run.
        advance_walks();
        if (c0 + K < t_end) fetch(static_cast<int>(t_end - c0 - K < K ? t_end - c0 - K : K));

        // ---- 2. steps, kSub at a time ----
        for (int i0 = 0; i0 < steps; i0 += kSub) {
          const int64_t t0 = c0 + i0;
          // Fast path: a whole interval with no sequence start inside it.
          const bool whole = i0 + kSub <= steps && (!p.offsets || seq + 1 >= p.num_seqs || seq_end >= t0 + kSub);
          if (whole) {
            if (!kSummary && p.checkpoints) save_checkpoint(t0);
            if constexpr (kSumSteps > 0 && !kSummary) {
              static_assert(kSub % (kSumSteps > 0 ? kSumSteps : 1) == 0, "whole groups of summed steps");
              Acc y[kSumSteps > 0 ? kSumSteps : 1];
#pragma unroll
              for (int i = 0; i < kSub; ++i) {
                y[i % kSumSteps] = step(i0 + i);
                if (i % kSumSteps == kSumSteps - 1) {  // the channel's thread q gets the group's step q
                  sum_over_channel_threads<kSumSteps, kPairedFixed>(y);
                  s_y[y_row + i0 + i + 1 - kSumSteps + me.quad] = y[0];
                }
              }
            } else {
#pragma unroll
              for (int i = 0; i < kSub; ++i) step_and_store(i0 + i);
            }
          } else {
            const int i_end = i0 + kSub < steps ? i0 + kSub : steps;
            for (int i = i0; i < i_end; ++i) {
              const int64_t t = c0 + i;
              while (p.offsets && seq + 1 < p.num_seqs && t >= seq_end) {  // a sequence ends: save, restart
                if (!kSummary) save_last(seq);
                seq_end = sequence_end(p, ++seq);
                load_initial(seq);
              }
              if (!kSummary && p.checkpoints && i == i0) save_checkpoint(t);
              step_and_store(i);
            }
          }
        }
        if constexpr (kSummary) continue;  // no y: the next staging's barrier suffices
        __syncthreads();

        // ---- 3. finish: out = (y + D u) silu(z), or y's partial sum into the scratch ----
#pragma unroll
        for (int r = 0; r < (kFixed ? kItemRounds : items.rounds); ++r) {
          if (!item_real(r, steps)) continue;
          const int channel = items.row(r);
          Acc results[kSteps];
#pragma unroll
          for (int k = 0; k < kSteps; ++k) {
            const int step_in_chunk = items.column(r) * kSteps + k;
            Acc y = 0;
            if constexpr (kYSummed) {
              y = s_y[channel * kPitch + step_in_chunk];
            } else {
              const Acc* parts = s_y + channel * threads_per_channel * kPitch + step_in_chunk;
#pragma unroll
              for (int q = 0; q < threads_per_channel; ++q) y += parts[q * kPitch];
            }
            if (state_tiles > 1) {  // (one step an item: kSteps is 1 with state tiles)
              Acc& acc = y_scratch[(me.b * p.dim + d0 + channel) * p.len + c0 + step_in_chunk];
              if (tile > 0) y += acc;
              if (!last_tile) acc = y;
            }
            const int at = channel * kPitch + step_in_chunk;
            results[k] = (y + s_skip[at]) * s_gate[at];
          }
          if (state_tiles == 1 || last_tile) store_steps<In, Acc, kSteps>(out + out_walk.at(r), results);
        }
        out_walk.base += out_walk.chunk_stride;
      }
      if constexpr (kSummary) {
        Acc decay[S];
#pragma unroll
        for (int j = 0; j < S; ++j) decay[j] = restarted ? Acc(0) : Gate<Acc>::exp_scaled(delta_sum * A2[j]);
        store_segment_summary(p, s, me, n0, has_state, h, decay);
        if (plan.summary_done != nullptr && last_tile) signal_summary_done(plan.summary_done + summary_task(p, s, me));
      } else if (t_end < p.len) {
        // A segment before the last: the sequences that end at its end (empty ones
        // included); the next segment starts with the sequence after them.
        while (p.offsets && seq + 1 < p.num_seqs && seq_end <= t_end) {
          save_last(seq);
          seq_end = sequence_end(p, ++seq);
          load_initial(seq);
        }
      } else {
        // The last sequence's state, then empty sequences after it keep their initial state.
        const int64_t last_seq = p.offsets ? p.num_seqs - 1 : me.b;
        for (; seq <= last_seq; ++seq) {
          save_last(seq);
          if (seq < last_seq) load_initial(seq + 1);
        }
      }
    }
  }
}

}  // namespace parprims::cuda
