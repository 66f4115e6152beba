// What the selective-scan kernels share: the thread's place in the launch shape (launch.h),
// typed loads, and the walk over packed sequences.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <type_traits>

#include "../../core/selective_scan.h"
#include "launch.h"

namespace parprims::cuda {

// The gate exp(delta * A): float uses the special-function unit's exp2 on A pre-scaled by
// log2(e): one MUFU.EX2 per state update (exp2f adds a denormal fix-up around it; the
// recurrence multiplies by the gate, so a gate below 2^-126 flushed to zero changes nothing
// visible). Double uses exp.
template <class Acc>
struct Gate {
  static constexpr Acc kScale = sizeof(Acc) == 4 ? Acc(1.4426950408889634) : Acc(1);
  static __device__ __forceinline__ Acc exp_scaled(Acc x) {
    if constexpr (sizeof(Acc) == 4) {
      float y;
      asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
      return y;
    } else {
      return ::exp(x);
    }
  }
};

// The per-element functions of the kernels' staging passes, with the special-function unit's
// exp2 and reciprocal in float (relative errors about 2^-22, as mamba-ssm builds with fast
// math); exact in double. Both flush denormal results to zero: exp of a value below -87 is 0,
// and a sigmoid of a value below -87 is 0, which changes softplus and silu by less than 1e-37.
// (`__expf` wraps a denormal fix-up around the exp2, and `__frcp_rn` is the correctly rounded
// reciprocal with a slow path: 10 more instructions per element of the staging.)
template <class Acc>
__device__ __forceinline__ Acc fast_exp(Acc x) {
  if constexpr (sizeof(Acc) == 4) {
    return Gate<Acc>::exp_scaled(x * Gate<Acc>::kScale);
  } else {
    return ::exp(x);
  }
}

__device__ __forceinline__ float fast_reciprocal(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <class Acc>
__device__ __forceinline__ Acc fast_sigmoid(Acc x) {
  if constexpr (sizeof(Acc) == 4) {
    return fast_reciprocal(1.0f + fast_exp(-x));
  } else {
    return sigmoid(x);
  }
}

// softplus(x) = max(x, 0) + log1p(w) with w = exp(-|x|) in (0, 1], and log1p(w) = w P(w), P the
// degree-9 polynomial nearest log1p(w) / w on [0, 1] in relative error (4.7e-9; fitted by
// iteratively reweighted least squares at Chebyshev nodes): straight-line, 12 instructions
// with one special-function one, within 3 ulp of softplus in float (the exp2's error
// included: log1p damps w's relative error). (log1pf: 25 instructions and a branch per
// element; log1p as 2 atanh(w / (2 + w)): a reciprocal on the special-function unit and two
// instructions more.)
__device__ __forceinline__ float fast_softplus(float x) {
  constexpr float P[] = {1.000000000e+00f,  -4.999990165e-01f, 3.332996368e-01f,  -2.495413423e-01f,
                         1.967593879e-01f,  -1.530559212e-01f, 1.060365364e-01f,  -5.695951730e-02f,
                         1.985145174e-02f,  -3.244022373e-03f};
  const float w = fast_exp(-fabsf(x));
  float poly = P[9];
#pragma unroll
  for (int k = 8; k >= 0; --k) poly = fmaf(poly, w, P[k]);
  return fmaf(w, poly, fmaxf(x, 0.0f));
}

template <class Acc>
__device__ __forceinline__ Acc fast_silu(Acc x) {
  return x * fast_sigmoid(x);
}

// delta after its bias and (optionally) softplus, PyTorch's threshold 20 included. In float
// the softplus is computed whatever the branch and selected (straight-line code: a branch
// around it cost the staging a convergence barrier and a jump per element).
template <class Acc>
__device__ __forceinline__ Acc fast_processed_delta(Acc raw, Acc bias, bool use_softplus) {
  const Acc x = raw + bias;
  if constexpr (sizeof(Acc) == 4) {
    const Acc softplus = fast_softplus(x);
    return use_softplus && x <= Acc(20) ? softplus : x;
  } else {
    if (!use_softplus || x > Acc(20)) return x;
    return ::log1p(::exp(x));
  }
}

// delta after its bias and softplus as fast_processed_delta gives it, and d(delta)/d(raw delta):
// sigmoid(x) under softplus (1 past its threshold), 1 without.
template <class Acc>
__device__ __forceinline__ void fast_processed_delta_and_grad(Acc raw, Acc bias, bool use_softplus, Acc& delta,
                                                              Acc& grad) {
  const Acc x = raw + bias;
  delta = fast_processed_delta(raw, bias, use_softplus);
  grad = (!use_softplus || x > Acc(20)) ? Acc(1) : fast_sigmoid(x);
}

// An input element's bits, widened to a whole register. The kernels hold a chunk's loads in
// registers while they work on the previous chunk, and convert them only when they stage them:
// held as In, a 16-bit value's select with zero (an item outside the data) merged into the
// load's register and waited for the load, and held converted, the conversion did (ncu at
// (8, 1536, 2048, 16) bf16: 4x the fp32 kernel's long-scoreboard stalls, 0.775 against
// 0.597 ms); a select of whole registers waits for nothing.
template <class In>
using RawInput = std::conditional_t<sizeof(In) == 8, unsigned long long, unsigned int>;

template <class In>
__device__ __forceinline__ RawInput<In> load_raw(const In* at) {
  static_assert(sizeof(In) == 2 || sizeof(In) == 4 || sizeof(In) == 8, "16-, 32- or 64-bit inputs");
  if constexpr (sizeof(In) == 2) {
    return *reinterpret_cast<const unsigned short*>(at);
  } else {
    return *reinterpret_cast<const RawInput<In>*>(at);
  }
}

template <class In, class Acc>
__device__ __forceinline__ Acc from_raw(RawInput<In> raw) {
  if constexpr (std::is_same_v<In, float>) {
    return static_cast<Acc>(__uint_as_float(raw));
  } else if constexpr (std::is_same_v<In, double>) {
    return static_cast<Acc>(__longlong_as_double(static_cast<long long>(raw)));
  } else {  // c10::Half, c10::BFloat16
    return static_cast<Acc>(In(static_cast<uint16_t>(raw), In::from_bits()));
  }
}

// A thread's item of P = 1 or 2 consecutive time steps of a time-contiguous input, unconverted
// (as RawInput): with P = 2 both steps come in one load of twice the width, and the item's
// address and test serve two elements. At most 8 bytes (P = 2 only for 16- and 32-bit inputs).
// An item is in the data or not as a whole: two steps an item are taken only where every
// chunk's count of steps is even (selective_scan_forward.cu).
template <class In, int P>
struct RawSteps {
  static_assert(P == 1 || (P == 2 && sizeof(In) <= 4), "one step, or two of a 16- or 32-bit input");
  using Bits = std::conditional_t<P * sizeof(In) == 8, unsigned long long, unsigned int>;
  Bits bits = 0;

  // The item at `at` (aligned to P elements), or zero bits when it is not in the data.
  static __device__ __forceinline__ RawSteps load(const In* at, bool real) {
    RawSteps r;
    if constexpr (P == 1) {
      r.bits = real ? load_raw(at) : Bits(0);
    } else {
      r.bits = real ? *reinterpret_cast<const Bits*>(at) : Bits(0);
    }
    return r;
  }
  template <class Acc>
  __device__ __forceinline__ Acc value(int k) const {
    constexpr int kBits = 8 * sizeof(In);
    if constexpr (kBits == 64) {
      return from_raw<In, Acc>(bits);
    } else {
      return from_raw<In, Acc>(static_cast<RawInput<In>>((bits >> (kBits * k)) & ((1ull << kBits) - 1)));
    }
  }
};

// Stores P = 1 or 2 consecutive values of one row at `at` (aligned to P values).
template <class In, class Acc, int P>
__device__ __forceinline__ void store_steps(In* at, const Acc (&v)[P]) {
  if constexpr (P == 1) {
    at[0] = static_cast<In>(v[0]);
  } else if constexpr (std::is_same_v<In, float>) {
    *reinterpret_cast<float2*>(at) = make_float2(v[0], v[1]);
  } else {  // c10::Half, c10::BFloat16: their bits side by side
    const In lo = static_cast<In>(v[0]), hi = static_cast<In>(v[1]);
    *reinterpret_cast<unsigned int*>(at) = static_cast<unsigned int>(lo.x) | (static_cast<unsigned int>(hi.x) << 16);
  }
}

// Loads (stores) S = 2, 4 or 8 consecutive values at `at`, aligned to S values (to 4 when S
// is 8), in vector accesses of at most 16 bytes.
template <class Acc, int S>
__device__ __forceinline__ void load_states(const Acc* at, Acc (&dst)[S]) {
  static_assert(S == 2 || S == 4 || S == 8, "two, four or eight values");
  if constexpr (sizeof(Acc) == 4 && S >= 4) {
#pragma unroll
    for (int k = 0; k < S / 4; ++k) {
      const float4 v = reinterpret_cast<const float4*>(at)[k];
      dst[4 * k] = v.x, dst[4 * k + 1] = v.y, dst[4 * k + 2] = v.z, dst[4 * k + 3] = v.w;
    }
  } else if constexpr (sizeof(Acc) == 4) {
    const float2 v = *reinterpret_cast<const float2*>(at);
    dst[0] = v.x, dst[1] = v.y;
  } else {
#pragma unroll
    for (int k = 0; k < S / 2; ++k) {
      const double2 v = reinterpret_cast<const double2*>(at)[k];
      dst[2 * k] = v.x, dst[2 * k + 1] = v.y;
    }
  }
}

template <class Acc, int S>
__device__ __forceinline__ void store_states(Acc* at, const Acc (&src)[S]) {
  static_assert(S == 2 || S == 4 || S == 8, "two, four or eight values");
  if constexpr (sizeof(Acc) == 4 && S >= 4) {
#pragma unroll
    for (int k = 0; k < S / 4; ++k) {
      reinterpret_cast<float4*>(at)[k] = make_float4(src[4 * k], src[4 * k + 1], src[4 * k + 2], src[4 * k + 3]);
    }
  } else if constexpr (sizeof(Acc) == 4) {
    *reinterpret_cast<float2*>(at) = make_float2(src[0], src[1]);
  } else {
#pragma unroll
    for (int k = 0; k < S / 2; ++k) reinterpret_cast<double2*>(at)[k] = make_double2(src[2 * k], src[2 * k + 1]);
  }
}

// Segments start at multiples of both kernels' chunks (and of the checkpoint spacing).
constexpr int64_t kSegmentAlign = 64;

// Which lanes hold a channel's threads (ThreadPlace): a lane mask given in the consecutive
// layout (bits below threads_per_channel: the channel's threads; from it up: the warp's
// channels) and its lanes in the paired layout, where the channel's threads sit one lane bit up
// and the lowest channel bit is lane bit 0 (the higher channel bits stay where they are).
struct LaneLayout {
  int threads_per_channel;
  bool paired;
  __device__ __forceinline__ int mask(int consecutive) const {
    if (!paired) return consecutive;
    return consecutive < threads_per_channel ? consecutive << 1 : consecutive == threads_per_channel ? 1 : consecutive;
  }
};

// Where a thread sits: batch row, group, block of channels, its channel and its states, and
// the time segment [t_begin, t_end) its block walks.
struct ThreadPlace {
  int64_t b, group, block_in_group, d;
  int64_t segment, t_begin, t_end;
  int channel;        // within the block
  int quad;           // which states of the tile (lane within the channel)
  int channels_here;  // the block's channels that exist (the last block of a group may be partial)
  bool active;        // the thread's channel exists
  LaneLayout lanes;

  // Lanes and (channel, states): by default a channel's threads_per_channel threads are
  // consecutive lanes. With `pair_channels` (and 2 to 16 threads a channel), lane bit 0 picks
  // one of two channels and the bits above it the states, so lanes T and T^1 hold the same
  // states of two channels and lanes T and T^2 two state groups of one channel: a warp's
  // shared-memory loads of a step's B or C (one address per state group) and of a channel's
  // step operands (one per channel) then have every address read by a pair of lanes, which the
  // hardware answers at two lanes per returned word: a warp's 8- or 16-byte loads take half
  // the wavefronts (shared memory returns one 4-byte word a lane per wavefront otherwise).
  // Measured on the H200 at (8, 1536, 2048, 16): forward 5 %, backward 5 % faster.
  __device__ ThreadPlace(const SelectiveScanParams& p, const SelectiveScanShape& s, int64_t launched_block,
                         bool pair_channels = false) {
    const int64_t block_id = s.first_block + launched_block;
    segment = block_id / s.channel_blocks;
    const int64_t block = block_id % s.channel_blocks;
    t_begin = s.segments > 1 ? segment * s.segment_len : 0;
    t_end = s.segments > 1 && t_begin + s.segment_len < p.len ? t_begin + s.segment_len : p.len;
    block_in_group = block % s.blocks_per_group;
    group = (block / s.blocks_per_group) % p.groups;
    b = block / (s.blocks_per_group * p.groups);
    lanes = LaneLayout{s.threads_per_channel, pair_channels && s.threads_per_channel > 1 && s.threads_per_channel < 32};
    if (lanes.paired) {
      channel = ((threadIdx.x >> (1 + s.log2_threads_per_channel)) << 1) | (threadIdx.x & 1);
      quad = (threadIdx.x >> 1) & (s.threads_per_channel - 1);
    } else {
      channel = threadIdx.x >> s.log2_threads_per_channel;
      quad = threadIdx.x & (s.threads_per_channel - 1);
    }
    const int64_t first_local = block_in_group * s.channels_per_block;
    const int64_t left = p.dim_per_group - first_local;
    channels_here = left < s.channels_per_block ? static_cast<int>(left) : s.channels_per_block;
    active = channel < channels_here;
    d = group * p.dim_per_group + (active ? first_local + channel : 0);
  }
  // The first channel of the block, and whether block-local channel c exists.
  __device__ int64_t first_channel(const SelectiveScanParams& p, const SelectiveScanShape& s) const {
    return group * p.dim_per_group + block_in_group * s.channels_per_block;
  }
  __device__ bool has_channel(int c) const { return c < channels_here; }
  // Index of state n of the thread's channel in a (segments, batch, dim, N) array.
  __device__ int64_t segment_at(const SelectiveScanParams& p, int64_t n) const {
    return ((segment * p.batch + b) * p.dim + d) * p.dstate + n;
  }
  // The row of the backward's per-task partial sums: (segments * batch) rows.
  __device__ int64_t partial_row(const SelectiveScanParams& p) const { return segment * p.batch + b; }
};

// A summary pass's result for the thread's S states from n0: the state (or state gradient) and
// the product of the gates over its segment.
template <class Acc, int S>
__device__ __forceinline__ void store_segment_summary(const SelectiveScanParams& p, const SelectiveScanShape& s,
                                                      const ThreadPlace& me, int64_t n0, const bool (&has_state)[S],
                                                      const Acc (&state)[S], const Acc (&decay)[S]) {
#pragma unroll
  for (int j = 0; j < S; ++j) {
    if (!has_state[j]) continue;
    static_cast<Acc*>(s.segment_state)[me.segment_at(p, n0 + j)] = state[j];
    static_cast<Acc*>(s.segment_decay)[me.segment_at(p, n0 + j)] = decay[j];
  }
}

// The combine pass of time segments: per (batch, channel, state), the state entering each
// segment from the segments' summaries, carry_{k+1} = decay_k * carry_k + state_k from
// carry_0 = 0 (from the last segment back when `reverse`: the backward's state gradient),
// written over state_k. A decay of zero (a sequence starts inside the segment) drops the carry
// even when it is not finite. The last segment walked has no summary (nothing follows it).
template <class Acc>
__global__ void combine_segments_kernel(Acc* state, const Acc* decay, int64_t segments, int64_t per_segment,
                                        bool reverse) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < per_segment;
       i += int64_t{gridDim.x} * blockDim.x) {
    Acc carry = 0;
    for (int64_t k = 0; k < segments; ++k) {
      const int64_t at = (reverse ? segments - 1 - k : k) * per_segment + i;
      const Acc summary = k + 1 < segments ? state[at] : Acc(0);
      const Acc gates = k + 1 < segments ? decay[at] : Acc(0);
      state[at] = carry;
      carry = gates == Acc(0) ? summary : gates * carry + summary;
    }
  }
}

template <class In, class Acc>
__device__ __forceinline__ Acc load_as(const void* base, int64_t at) {
  return static_cast<Acc>(static_cast<const In*>(base)[at]);
}

// Where a thread's items of a chunk's rows x columns grid sit: blockDim.x consecutive items per
// round, the columns (time steps, when `columns_fastest`) or the rows fastest. Both counts are
// powers of two, so round r's item is (row0 + r * row_step, column0 + r * column_step) in
// every chunk, and its address is a base plus r times a stride. When the grid is smaller than
// a round (B and C with N <= 2), the items past it have column >= columns.
struct ItemWalk {
  int row0, column0, row_step, column_step, rounds;
  // `t`: the thread's index among the Policy::kThreads threads that share the items (the
  // block's, or one warp group's where warps are specialized).
  __device__ ItemWalk(int rows, int columns, bool columns_fastest, int t = static_cast<int>(threadIdx.x)) {
    rounds = (rows * columns + Policy::kThreads - 1) / Policy::kThreads;
    if (columns_fastest) {
      row0 = t / columns, column0 = t % columns, row_step = Policy::kThreads / columns, column_step = 0;
    } else {
      row0 = t % rows, column0 = t / rows, row_step = 0, column_step = Policy::kThreads / rows;
    }
  }
  __device__ int row(int r) const { return row0 + r * row_step; }
  __device__ int column(int r) const { return column0 + r * column_step; }
};

// A thread's walk over one strided tensor: the element of its round-0 item of the current
// chunk, and the element distance between rounds and between chunks.
struct StridedWalk {
  int64_t base, round_stride, chunk_stride;
  __device__ StridedWalk(int64_t origin, int64_t row_stride, int64_t column_stride, const ItemWalk& w,
                         int64_t chunk_columns)
      : base(origin + w.row0 * row_stride + w.column0 * column_stride),
        round_stride(w.row_step * row_stride + w.column_step * column_stride),
        chunk_stride(chunk_columns * column_stride) {}
  __device__ int64_t at(int r) const { return base + r * round_stride; }
};

// Packed sequences: the last sequence k with offsets[k] <= t (a sequence holding t, or the
// last of empty ones before it), by binary search.
__device__ __forceinline__ int64_t sequence_of(const SelectiveScanParams& p, int64_t t) {
  int64_t lo = 0, hi = p.num_seqs - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (p.seq_offset(mid) <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ int64_t sequence_end(const SelectiveScanParams& p, int64_t k) {
  return (p.offsets && k + 1 < p.num_seqs) ? p.seq_offset(k + 1) : p.len;
}

// Where the backward's summary pass ends its walk (the forward's begins at
// planned_summary_begin, time_segments.cuh). With packed sequences, the state gradient entering a
// segment's first step depends only on the steps up to the end of the sequence holding that
// step: the summary walks those chunks (of K steps) alone. The restart inside the walk zeroes
// the gates' product, as when it walks the whole segment.
__device__ __forceinline__ int64_t backward_summary_end(const SelectiveScanParams& p, const ThreadPlace& me, int K) {
  if (!p.offsets) return me.t_end;
  const int64_t first_end = sequence_end(p, sequence_of(p, me.t_begin));
  const int64_t chunk_end = (first_end + K - 1) / K * K;
  return chunk_end < me.t_end ? chunk_end : me.t_end;
}

}  // namespace parprims::cuda
