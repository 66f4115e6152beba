// The backward's sums over lanes (selective_scan/backward.cuh): per step, dB and dC over the
// channels of a warp (and where each lane stores them); per few steps, a channel's values over
// its threads.
#pragma once

#include "common.cuh"

namespace parprims::cuda {

// One halving round over the lanes that differ in `mask`: of v[0, 2 * kHalf), the lower lane
// keeps the first half and the upper lane the second, each summed with the partner's copy of
// it, into v[0, kHalf). One shuffle per value kept. Returns whether this lane is the upper one.
template <int kHalf, class Acc, int kCount>
__device__ __forceinline__ bool keep_half_summed(Acc (&v)[kCount], int mask) {
  static_assert(2 * kHalf <= kCount, "a half of the values held");
  const bool upper = (threadIdx.x & mask) != 0;
#pragma unroll
  for (int j = 0; j < kHalf; ++j) {
    const Acc send = upper ? v[j] : v[j + kHalf];
    const Acc keep = upper ? v[j + kHalf] : v[j];
    v[j] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
  }
  return upper;
}

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
    if (keep_half_summed<kHalf>(v, mask)) base += kHalf;
    count = kHalf;
  }

  // Rounds over the channel bits `mask` (in the consecutive layout) down to
  // threads_per_channel, kHalf values kept each; `lanes` turns them into lane masks.
  template <int kHalf>
  __device__ __forceinline__ void halve_from(int mask, int threads_per_channel, const LaneLayout& lanes) {
    if (mask < threads_per_channel) return;
    halve<kHalf>(lanes.mask(mask));
    if constexpr (kHalf > 1) {
      halve_from<kHalf / 2>(mask >> 1, threads_per_channel, lanes);
    } else {
      for (mask >>= 1; mask >= threads_per_channel; mask >>= 1) {
        v[0] += __shfl_xor_sync(0xffffffffu, v[0], lanes.mask(mask));
        if (threadIdx.x & lanes.mask(mask)) writer = false;
      }
    }
  }

  __device__ __forceinline__ void run(const LaneLayout& lanes) {
    halve_from<kStates>(16, lanes.threads_per_channel, lanes);
  }
};

// Where a lane stores the sums a step's ChannelReduction leaves it, in the block's rows of warp
// sums ([warp][2 * S][step], rows `pitch` apart): the same places every step, found once by a
// reduction of zeros (`needed`: else nothing is stored).
template <class Acc>
struct WarpSumRows {
  ChannelReduction<Acc> layout;
  int first;  // the row of the lane's first sum (entry base: dB of state base, or dC of base - kStates)
  int cross;  // what a row past the lane's dB sums adds (only a lane that keeps all 2 * kStates
              // sums, when no channels share its warp, passes from dB to dC)
  int pitch;

  __device__ __forceinline__ WarpSumRows(const LaneLayout& lanes, bool needed, int warp, int S, int state0,
                                         int pitch_) : pitch(pitch_) {
    if (needed) {
#pragma unroll
      for (int j = 0; j < 2 * kStates; ++j) layout.v[j] = Acc(0);
      layout.run(lanes);
    }
    first = ((warp * 2 + layout.base / kStates) * S + state0 + layout.base % kStates) * pitch;
    cross = (S - kStates) * pitch;
  }

  // The sums of step i (`sums`, after its run).
  __device__ __forceinline__ void store(Acc* rows, int i, const ChannelReduction<Acc>& sums) const {
    if (!layout.writer) return;
    const int row = first + i;
    if (layout.count == 1) {  // N <= 16: one sum per lane
      rows[row] = sums.v[0];
      return;
    }
#pragma unroll
    for (int j = 0; j < 2 * kStates; ++j) {
      if (j < layout.count) rows[row + j * pitch + (j >= kStates ? cross : 0)] = sums.v[j];
    }
  }
};

// The rounds of sum_over_channel_threads from the channel's thread bit kMask down to 1 (lane
// bits kShift higher), kHalf values kept in the first.
template <int kMask, int kHalf, int kShift, class Acc, int kCount>
__device__ __forceinline__ void halve_over_lanes(Acc (&v)[kCount]) {
  keep_half_summed<kHalf>(v, kMask << kShift);
  if constexpr (kMask > 1) halve_over_lanes<kMask / 2, kHalf / 2, kShift>(v);
}

// Sums each of the kCount values of v over the kThreads lanes of a channel, in a fixed order,
// halving as ChannelReduction does: kCount / 2 + kCount / 4 + ... shuffles for all of them
// instead of log2(kThreads) for each. On return v[0, kCount / kThreads) hold the sums of
// entries [q * kCount / kThreads, (q + 1) * kCount / kThreads), q the lane's place in its
// channel. kPaired: the lanes are in ThreadPlace's paired layout (a channel's threads one lane
// bit up), else consecutive.
template <int kThreads, bool kPaired, int kCount, class Acc>
__device__ __forceinline__ void sum_over_channel_threads(Acc (&v)[kCount]) {
  static_assert(kThreads > 1 && (kThreads & (kThreads - 1)) == 0 && kCount % kThreads == 0, "whole halvings");
  halve_over_lanes<kThreads / 2, kCount / 2, kPaired ? 1 : 0>(v);
}

}  // namespace parprims::cuda
