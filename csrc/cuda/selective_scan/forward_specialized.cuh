// The selective-scan forward's full pass for Mamba's shapes (N = 16, B and C variable, float
// compute) with its warps specialized: a block of 32 channels has two warp groups of
// Policy::kThreads threads,
//   - the steppers (warps 0-3: four threads a channel, four states a thread, as the plain
//     forward's fixed instance) walk the states through a chunk of K steps staged in shared
//     memory, save the checkpoints, and leave y summed over each channel's threads;
//   - the stagers (warps 4-7) load the next chunk's inputs, stage them (softplus(delta + bias),
//     delta u, D u, silu(z), B and C side by side) into the other of two chunk buffers, and
//     finish the chunk before it (out = (y + D u) silu(z)).
// The plain forward (forward.cuh) runs the same three stages one after the other in the same
// threads, with a barrier between them: there the loads and the per-element work overlapped the
// step loop by a third of their time (benchmarks/NOTES.md), while here a chunk's staging and the
// previous chunk's finish run beside the steps of the chunk between them. The groups hand the
// buffers over with named barriers (bar.arrive by the producing group, bar.sync by the waiting
// one), per buffer: `full` (the stagers filled it) and `stepped` (the steppers' y is in it).
// Buffer b is staged again for chunk c + 2 only after the stagers waited for chunk c's
// `stepped` and finished it, so no barrier is needed for the buffer being free.
// (compute-sanitizer's racecheck does not take bar.arrive as ordering the arriving threads'
// accesses before the waiting threads': it flags this kernel, and a minimal producer/consumer
// pair that the PTX barrier rules make correct, alike; synccheck and memcheck run clean.)
#pragma once

#include "forward.cuh"

namespace parprims::cuda {

// bar.sync / bar.arrive on named barrier `id` (1 to 15; 0 is __syncthreads) of `threads`
// threads. The arriving threads' earlier shared-memory writes are visible to the threads that
// pass the barrier's sync.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

struct SpecializedForward {
  static constexpr int kStates = Policy::kForwardStatesPerThread;
  static constexpr int kTileStates = 16;  // N
  static constexpr int kThreadsPerChannel = kTileStates / kStates;
  static constexpr int kChannels = Policy::kThreads / kThreadsPerChannel;
  static constexpr int kBlockThreads = 2 * Policy::kThreads;  // steppers, then stagers
  // Blocks an SM the kernel is compiled for (85 registers a thread), so that
  // (8, 1536, 2048, 16)'s 384 blocks run in one wave on 132 SMs.
  static constexpr int kMinBlocksPerSM = 3;
  static constexpr int K = Policy::kForwardChunk, kSub = kSelectiveScanCheckpointEvery, kPitch = K + 1;
  // Named barriers: `full` of buffer b is kFull + b, `stepped` kStepped + b; the stagers' own
  // barrier (the channels' constants) kStagers.
  static constexpr int kFull = 1, kStepped = 3, kStagers = 5;

  // One chunk buffer, in floats: (delta, delta u) pairs, D u, silu(z) and y by [channel][step]
  // (rows padded), then (B, C) side by side by [step][state] (16-byte aligned).
  static constexpr int kRows = kChannels * kPitch;
  static constexpr int kBCOffset = (5 * kRows + 3) / 4 * 4;
  static constexpr int kBufferFloats = kBCOffset + 2 * K * kTileStates;
  static constexpr size_t smem_bytes() { return (2 * kBufferFloats + 2 * kChannels) * sizeof(float); }

  template <class Acc>
  struct Buffer {
    DeltaPair<Acc>* pair;
    Acc *skip, *gate, *y, *BC;
    __device__ Buffer(unsigned char* smem, int b) {
      Acc* base = reinterpret_cast<Acc*>(smem) + b * kBufferFloats;
      pair = reinterpret_cast<DeltaPair<Acc>*>(base);
      skip = base + 2 * kRows;
      gate = skip + kRows;
      y = gate + kRows;
      BC = base + kBCOffset;
    }
  };
  template <class Acc>
  static __device__ ChannelConstants<Acc>* constants(unsigned char* smem) {
    return reinterpret_cast<ChannelConstants<Acc>*>(reinterpret_cast<Acc*>(smem) + 2 * kBufferFloats);
  }
};

// The steppers: thread `me` walks its four states through the block's segment, chunk by chunk,
// as the plain forward's fixed instance does in its step stage: packed sequences restart the
// walk (an interval holding a sequence start takes it step by step), and the sequences that end
// in the segment save their last state.
// `carries`: the state entering each segment, (segments, batch, dim, N) (the combine pass's, or
// the folded ones).
template <class Acc>
__device__ __forceinline__ void step_chunks(const SelectiveScanParams& p, const ThreadPlace& me, const Acc* carries,
                                            unsigned char* smem) {
  using F = SpecializedForward;
  constexpr int S = F::kStates, K = F::K, kSub = F::kSub, kPitch = F::kPitch, kT = F::kThreadsPerChannel;
  const int state0 = me.quad * S;
  const int64_t n0 = state0;
  Acc A2[S], h[S];
  bool has_state[S];
#pragma unroll
  for (int j = 0; j < S; ++j) {
    has_state[j] = me.active && n0 + j < p.dstate;
    A2[j] = has_state[j] ? static_cast<const Acc*>(p.A)[me.d * p.dstate + n0 + j] * Gate<Acc>::kScale : Acc(0);
  }
  const Acc* init = static_cast<const Acc*>(p.initial_state);
  Acc* last = static_cast<Acc*>(p.last_state);
  auto load_initial = [&](int64_t k) {
#pragma unroll
    for (int j = 0; j < S; ++j) h[j] = (init && has_state[j]) ? init[(k * p.dim + me.d) * p.dstate + n0 + j] : Acc(0);
  };
  auto save_last = [&](int64_t k) {
#pragma unroll
    for (int j = 0; j < S; ++j) {
      if (has_state[j]) last[(k * p.dim + me.d) * p.dstate + n0 + j] = h[j];
    }
  };
  // The sequence of the segment's first step, and where it ends.
  int64_t seq = p.offsets ? (me.t_begin == 0 ? 0 : sequence_of(p, me.t_begin)) : me.b;
  int64_t seq_end = sequence_end(p, seq);
  if (me.t_begin == 0 || (p.offsets && p.seq_offset(seq) == me.t_begin)) {
    load_initial(seq);
  } else {  // from the segment's carry
#pragma unroll
    for (int j = 0; j < S; ++j) h[j] = has_state[j] ? carries[me.segment_at(p, n0 + j)] : Acc(0);
  }
  Acc* const checkpoint_row =
      p.checkpoints ? static_cast<Acc*>(p.checkpoints) + (me.b * p.dim + me.d) * p.checkpoint_chunks * p.dstate + n0
                    : nullptr;
  const bool saves_checkpoints = checkpoint_row != nullptr && me.active;
  auto save_checkpoint = [&](int64_t t) {
    if (saves_checkpoints) store_states(checkpoint_row + (t / kSub) * p.dstate, h);
  };
  const int y_row = me.channel * kPitch;

  int buffer = 0;
  for (int64_t c0 = me.t_begin; c0 < me.t_end; c0 += K, buffer ^= 1) {
    const int steps = static_cast<int>(me.t_end - c0 < K ? me.t_end - c0 : K);
    const SpecializedForward::Buffer<Acc> buf(smem, buffer);
    auto step = [&](int i) {
      const DeltaPair<Acc> dd = buf.pair[y_row + i];
      Acc BC[2 * S];
      load_states<Acc, 2 * S>(buf.BC + 2 * (i * F::kTileStates + state0), BC);
      Acc y = 0;
#pragma unroll
      for (int j = 0; j < S; ++j) {
        const Acc a = Gate<Acc>::exp_scaled(dd.delta * A2[j]);
        h[j] = a * h[j] + dd.delta_u * BC[2 * j];
        y += BC[2 * j + 1] * h[j];
      }
      return y;
    };
    named_barrier_sync(F::kFull + buffer, F::kBlockThreads);
    for (int i0 = 0; i0 < steps; i0 += kSub) {
      const int64_t t0 = c0 + i0;
      // A whole interval with no sequence start inside it.
      if (i0 + kSub <= steps && (!p.offsets || seq + 1 >= p.num_seqs || seq_end >= t0 + kSub)) {
        save_checkpoint(t0);
        Acc y[kT];
#pragma unroll
        for (int i = 0; i < kSub; ++i) {
          y[i % kT] = step(i0 + i);
          if (i % kT == kT - 1) {  // the channel's thread q gets the group's step q
            sum_over_channel_threads<kT, true>(y);
            buf.y[y_row + i0 + i + 1 - kT + me.quad] = y[0];
          }
        }
        continue;
      }
      // Step by step, each step's y summed alone.
      const int i_end = i0 + kSub < steps ? i0 + kSub : steps;
      for (int i = i0; i < i_end; ++i) {
        while (p.offsets && seq + 1 < p.num_seqs && c0 + i >= seq_end) {  // a sequence ends: save, restart
          save_last(seq);
          seq_end = sequence_end(p, ++seq);
          load_initial(seq);
        }
        if (i == i0) save_checkpoint(c0 + i);
        Acc y = step(i);
#pragma unroll
        for (int mask = kT / 2; mask > 0; mask >>= 1) y += __shfl_xor_sync(0xffffffffu, y, me.lanes.mask(mask));
        if (me.quad == 0) buf.y[y_row + i] = y;
      }
    }
    named_barrier_arrive(F::kStepped + buffer, F::kBlockThreads);
  }
  if (me.t_end < p.len) {
    // The sequences that end at the segment's end (empty ones included).
    while (p.offsets && seq + 1 < p.num_seqs && seq_end <= me.t_end) {
      save_last(seq);
      seq_end = sequence_end(p, ++seq);
      load_initial(seq);
    }
    return;
  }
  // The last sequence's state, then empty sequences after it keep their initial state.
  const int64_t last_seq = p.offsets ? p.num_seqs - 1 : me.b;
  for (; seq <= last_seq; ++seq) {
    save_last(seq);
    if (seq < last_seq) load_initial(seq + 1);
  }
}

// The stagers: thread t (0 to Policy::kThreads - 1 within the group) loads, stages and finishes
// its items of every chunk, one chunk ahead of the steppers on the loads and staging and one
// behind on the finish.
template <class In, class Acc, int kSteps>
__device__ __forceinline__ void stage_and_finish_chunks(const SelectiveScanParams& p, const SelectiveScanShape& s,
                                                        const ThreadPlace& me, unsigned char* smem, int t) {
  using F = SpecializedForward;
  constexpr int K = F::K, kPitch = F::kPitch, kColumns = K / kSteps;
  constexpr int kRounds = F::kChannels * kColumns / Policy::kThreads;
  constexpr int kStateRounds = F::kTileStates * kColumns / Policy::kThreads;
  static_assert(kRounds * Policy::kThreads == F::kChannels * kColumns && kStateRounds * Policy::kThreads ==
                    F::kTileStates * kColumns, "whole rounds of items");
  const int64_t d0 = me.first_channel(p, s);
  ChannelConstants<Acc>* s_channel = F::constants<Acc>(smem);
  for (int c = t; c < F::kChannels; c += Policy::kThreads) {
    const bool here = me.has_channel(c);
    const Acc* bias = static_cast<const Acc*>(p.delta_bias);
    const Acc* D = static_cast<const Acc*>(p.D);
    s_channel[c] = ChannelConstants<Acc>{(here && bias) ? bias[d0 + c] : Acc(0), (here && D) ? D[d0 + c] : Acc(0)};
  }
  named_barrier_sync(F::kStagers, Policy::kThreads);

  const ItemWalk items(F::kChannels, kColumns, kSteps > 1 || p.u.len_stride == 1, t);
  const ItemWalk state_items(F::kTileStates, kColumns, false, t);
  const int64_t t0 = me.t_begin;
  StridedWalk u_walk(p.u.offset(me.b, d0, t0), p.u.dim_stride, kSteps * p.u.len_stride, items, kColumns);
  StridedWalk delta_walk(p.delta.offset(me.b, d0, t0), p.delta.dim_stride, kSteps * p.delta.len_stride, items,
                         kColumns);
  StridedWalk z_walk(p.z.offset(me.b, d0, t0), p.z.dim_stride, kSteps * p.z.len_stride, items, kColumns);
  StridedWalk out_walk(p.out.offset(me.b, d0, t0), p.out.dim_stride, kSteps * p.out.len_stride, items, kColumns);
  StridedWalk B_walk(p.B.offset(me.b, me.group, 0, 0, t0), p.B.state_stride, kSteps * p.B.len_stride, state_items,
                     kColumns);
  StridedWalk C_walk(p.C.offset(me.b, me.group, 0, 0, t0), p.C.state_stride, kSteps * p.C.len_stride, state_items,
                     kColumns);
  const In* u_in = static_cast<const In*>(p.u.data);
  const In* delta_in = static_cast<const In*>(p.delta.data);
  const In* z_in = static_cast<const In*>(p.z.data);
  const In* B_in = static_cast<const In*>(p.B.data);
  const In* C_in = static_cast<const In*>(p.C.data);
  In* out = static_cast<In*>(const_cast<void*>(p.out.data));
  const bool has_D = p.D != nullptr;
  auto item_real = [&](int r, int steps) { return items.column(r) * kSteps < steps && me.has_channel(items.row(r)); };
  auto state_real = [&](int r, int steps) {
    return state_items.column(r) * kSteps < steps && state_items.row(r) < p.dstate;
  };
  using Raw = RawSteps<In, kSteps>;
  Raw u[kRounds], delta[kRounds], z[kRounds], B[kStateRounds], C[kStateRounds];
  auto fetch = [&](int steps) {
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      const bool real = item_real(r, steps);
      u[r] = Raw::load(u_in + u_walk.at(r), real);
      delta[r] = Raw::load(delta_in + delta_walk.at(r), real);
      z[r] = z_in ? Raw::load(z_in + z_walk.at(r), real) : Raw{};
    }
#pragma unroll
    for (int r = 0; r < kStateRounds; ++r) {
      B[r] = Raw::load(B_in + B_walk.at(r), state_real(r, steps));
      C[r] = Raw::load(C_in + C_walk.at(r), state_real(r, steps));
    }
  };
  auto stage = [&](const F::Buffer<Acc>& buf, int steps) {
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      const int channel = items.row(r);
      const bool real = item_real(r, steps);
      const ChannelConstants<Acc> constants = s_channel[channel];
#pragma unroll
      for (int k = 0; k < kSteps; ++k) {
        const Acc uk = u[r].template value<Acc>(k), zk = z[r].template value<Acc>(k);
        const int at = channel * kPitch + items.column(r) * kSteps + k;
        const Acc dl = fast_processed_delta(delta[r].template value<Acc>(k), constants.delta_bias, p.delta_softplus) *
                       (real ? Acc(1) : Acc(0));
        buf.pair[at] = DeltaPair<Acc>{dl, dl * uk};
        buf.skip[at] = (real && has_D) ? constants.D * uk : Acc(0);
        buf.gate[at] = z_in ? fast_silu(zk) : Acc(1);
      }
    }
#pragma unroll
    for (int r = 0; r < kStateRounds; ++r) {
#pragma unroll
      for (int k = 0; k < kSteps; ++k) {
        Acc* at = buf.BC + 2 * ((state_items.column(r) * kSteps + k) * F::kTileStates + state_items.row(r));
        store_states<Acc, 2>(at, {B[r].template value<Acc>(k), C[r].template value<Acc>(k)});
      }
    }
  };
  auto finish = [&](const F::Buffer<Acc>& buf, int steps) {
#pragma unroll
    for (int r = 0; r < kRounds; ++r) {
      if (!item_real(r, steps)) continue;
      Acc results[kSteps];
#pragma unroll
      for (int k = 0; k < kSteps; ++k) {
        const int at = items.row(r) * kPitch + items.column(r) * kSteps + k;
        results[k] = (buf.y[at] + buf.skip[at]) * buf.gate[at];
      }
      store_steps<In, Acc, kSteps>(out + out_walk.at(r), results);
    }
    out_walk.base += out_walk.chunk_stride;
  };

  auto steps_at = [&](int64_t c0) { return static_cast<int>(me.t_end - c0 < K ? me.t_end - c0 : K); };
  fetch(steps_at(me.t_begin));
  int buffer = 0;
  for (int64_t c0 = me.t_begin; c0 < me.t_end; c0 += K, buffer ^= 1) {
    const F::Buffer<Acc> buf(smem, buffer);
    stage(buf, steps_at(c0));
    named_barrier_arrive(F::kFull + buffer, F::kBlockThreads);
    for (StridedWalk* w : {&u_walk, &delta_walk, &z_walk, &B_walk, &C_walk}) w->base += w->chunk_stride;
    if (c0 + K < me.t_end) fetch(steps_at(c0 + K));
    if (c0 > me.t_begin) {  // the previous chunk, once its steps are done
      named_barrier_sync(F::kStepped + (buffer ^ 1), F::kBlockThreads);
      finish(F::Buffer<Acc>(smem, buffer ^ 1), K);
    }
  }
  const int64_t last_c0 = me.t_begin + (me.t_end - me.t_begin - 1) / K * K;
  named_barrier_sync(F::kStepped + (buffer ^ 1), F::kBlockThreads);
  finish(F::Buffer<Acc>(smem, buffer ^ 1), steps_at(last_c0));
}

// kStepsPerItem as in the plain forward (two steps an item where steps_in_pairs allows).
// Launched with SpecializedForward::kBlockThreads threads and smem_bytes() of shared memory,
// for N = 16 (one tile of 4 x 4 states): the full pass of every row, packed or not, in time
// segments or not. kFoldsCarries: the instance for a planned packed row whose carries it folds
// (plan.summary_done; launched beside the summary pass): its own instance, because the fold
// inlined into the others added spills to the float32 step loop.
template <class In, class Acc, int kStepsPerItem, bool kFoldsCarries = false>
__global__ void __launch_bounds__(SpecializedForward::kBlockThreads, SpecializedForward::kMinBlocksPerSM)
    selective_scan_forward_specialized_kernel(const SelectiveScanParams p, const SelectiveScanShape s,
                                              const SegmentPlan plan) {
  static_assert(sizeof(Acc) == sizeof(float), "the chunk buffers are laid out in floats");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const bool stepper = threadIdx.x < Policy::kThreads;
  for (int64_t block = blockIdx.x; block < s.blocks; block += gridDim.x) {
    __syncthreads();  // the previous block's chunks are finished: its buffers and constants are free
    const ThreadPlace me = place_of_block(p, s, plan, block, /*summary=*/false);
    if (me.t_begin == me.t_end) continue;
    if constexpr (kFoldsCarries) {
      fold_planned_carries<Acc, SpecializedForward::kChannels, SpecializedForward::kTileStates>(p, s, plan, me);
    }
    if (stepper) {
      step_chunks<Acc>(p, me, static_cast<const Acc*>(kFoldsCarries ? plan.carries : s.segment_state), smem_raw);
    } else {
      stage_and_finish_chunks<In, Acc, kStepsPerItem>(p, s, me, smem_raw,
                                                      static_cast<int>(threadIdx.x) - Policy::kThreads);
    }
  }
  // The summary pass ends before this grid does: a later kernel of the stream, which waits for
  // this grid alone, finds the summary's work done too.
  if constexpr (kFoldsCarries) wait_for_prerequisite_grid();
}

}  // namespace parprims::cuda
