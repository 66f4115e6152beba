// The forward's time segments over packed sequences planned on the device: a row's cuts moved to
// sequence starts when that is cheaper than uniform cuts, and the full pass's blocks ordered by
// segment length (launch.h's SelectiveScanShape says what time segments are; the backward keeps
// uniform cuts). With folded carries the full pass runs beside the summary pass instead of after
// it and a combine pass: each of its blocks that needs a carry waits for the summaries it folds.
#pragma once

#include <cstdint>

#include "common.cuh"

namespace parprims::cuda {

// Which cuts a planned row takes.
enum class SegmentCuts { kUniform, kAtSequenceStarts };

// A forward launch's plan of a packed row (all nullptr: uniform cuts, blocks in launch order).
struct SegmentPlan {
  const int64_t* bounds = nullptr;         // (segments + 1) bounds of the segments
  const int64_t* task_of_block = nullptr;  // the full pass's (segment, channel block) task of each block
  // Folded carries (nullptr: the combine pass makes them): a flag a summary task (segment,
  // channel block), set once its summary is stored (zeroed by the plan kernel), and the carries
  // the full pass's blocks fold, (segments, batch, dim, N) in the compute type.
  unsigned* summary_done = nullptr;
  void* carries = nullptr;
};

// Packed sequences: the first sequence k whose start is at or after step t (num_seqs if none),
// by binary search.
__device__ __forceinline__ int64_t first_sequence_from(const SelectiveScanParams& p, int64_t t) {
  int64_t lo = 0, hi = p.num_seqs;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (p.seq_offset(mid) < t) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// Where the forward's summary of the segment [t_begin, t_end) starts its walk. With packed
// sequences, a segment's end state depends only on the steps since the last sequence start
// inside it, so the walk starts at that start's chunk (of K steps); and at t_end (no walk) when
// a sequence starts right at t_end (the segment after it starts afresh and reads no carry) or
// t_end ends the row (the segment after it is empty: segment_bound).
__device__ __forceinline__ int64_t planned_summary_begin(const SelectiveScanParams& p, int64_t t_begin,
                                                         int64_t t_end, int K) {
  if (!p.offsets) return t_begin;
  if (t_end == p.len || p.seq_offset(sequence_of(p, t_end)) == t_end) return t_end;
  const int64_t last_start = p.seq_offset(sequence_of(p, t_end - 1));
  return last_start > t_begin ? last_start / K * K : t_begin;
}

// Bound i of a row's time segments under `cuts`: 0 for the first, len past the last. Uniform:
// i * segment_len. At sequence starts (the forward over packed sequences): the first sequence
// start from segment_len / 2 before that place, if it comes before the place after it, moved up
// to a multiple of kSegmentAlign, so that the segment before the cut ends a few steps into the
// new sequence and its summary walks only those (a uniform cut inside a sequence makes the
// summary walk the sequence's whole part of the segment). A sequence that covers the whole
// window keeps the uniform cut. Two cuts at one start leave an empty segment between them (its
// summary walks nothing: the identity; the full pass skips it), and a cut moved up to len an
// empty last one.
__device__ __forceinline__ int64_t segment_bound(const SelectiveScanParams& p, const SelectiveScanShape& s,
                                                 int64_t i, SegmentCuts cuts) {
  if (i <= 0) return 0;
  const int64_t uniform = i * s.segment_len;
  if (i >= s.segments || uniform >= p.len) return p.len;
  if (cuts == SegmentCuts::kUniform) return uniform;
  const int64_t k = first_sequence_from(p, uniform - s.segment_len / 2);
  const int64_t start = k < p.num_seqs ? p.seq_offset(k) : p.len;
  if (start >= uniform + s.segment_len || start >= p.len) return uniform;
  const int64_t up = (start + kSegmentAlign - 1) / kSegmentAlign * kSegmentAlign;
  return up < p.len ? up : p.len;
}

// What the forward's summary step costs against a full step, for the plan below: the summary,
// which stages no y, walked its 1536 steps of the benchmark's packed row (uniform cuts) in 0.67
// of the time a full step takes in the dense batch (torch.profiler's pass times, H100).
constexpr float kSummaryStepCost = 0.67f;

// About this many blocks an SM fill its issue slots and special-function unit: a full pass of
// more blocks an SM runs each of them slower (the forward's 528 blocks of 1490 steps take as long
// as the dense batch's 384 blocks of 2048, on 132 SMs).
constexpr int kBlocksAtFullPace = 3;

// The most segments a row planned on the device may have (the plan's shared memory; rows with
// more are cut uniformly: plan_time_segments, selective_scan_forward.cu).
constexpr int kMaxPlannedSegments = 1024;

// The plan of a packed row's segments in the forward, in one block: the uniform cuts and the
// cuts at sequence starts, each costed in steps, and the cheaper (or the one `rule` asks for:
// 1 uniform, 2 at starts) written to bounds[0..segments]. With a combine pass (`summary_done`
// nullptr), a rule costs its full pass, the longer of its longest segment and the row's steps
// spread over kBlocksAtFullPace blocks an SM, plus its summary pass, its longest summary walk at
// kSummaryStepCost (the summary's blocks run in one wave, and it lasts as long as its longest
// walk). With folded carries the two passes run together: the longer of the longest chain (a
// segment plus the walk of the summary just before it, which its carry waits for: the walks of
// one sequence's segments run side by side, and that one is the longest) and the steps of both
// passes spread over the SMs; the plan then also zeroes the summaries' flags. Cuts at starts
// spare the summaries their walks; uniform cuts keep the segments equal. Segments of unequal lengths load the SMs unequally, and
// a full pass runs at the pace of its most loaded SM: `task_of_block` orders the full pass's
// blocks (the tasks of ThreadPlace, segment-major) so that the blocks given out to the SMs
// first, one an SM in launch order, hold the longest segments, and the next ones, in reverse,
// the shortest of the rest ("snake" order over `sm_count` SMs; identity for uniform cuts).
// kChunk: the forward's steps a chunk (a summary walks whole chunks).
template <int kChunk>
__global__ void plan_time_segments_kernel(const SelectiveScanParams p, const SelectiveScanShape s, int rule, int sm_count,
                                          int64_t* bounds, int64_t* task_of_block, unsigned* summary_done) {
  __shared__ int64_t cut[2][kMaxPlannedSegments + 1];  // the bounds of each rule
  __shared__ int64_t walk[2][kMaxPlannedSegments];     // each summary's walk, in steps
  __shared__ int64_t by_length[kMaxPlannedSegments];   // the segments at starts, longest first
  __shared__ unsigned long long longest[2], longest_walk[2], longest_chain[2], walked[2];
  __shared__ int chosen;
  const SegmentCuts rules[2] = {SegmentCuts::kUniform, SegmentCuts::kAtSequenceStarts};
  if (threadIdx.x < 2) {
    longest[threadIdx.x] = longest_walk[threadIdx.x] = longest_chain[threadIdx.x] = walked[threadIdx.x] = 0;
  }
  for (int64_t i = threadIdx.x; i <= s.segments; i += blockDim.x) {
    cut[0][i] = segment_bound(p, s, i, rules[0]);
    cut[1][i] = segment_bound(p, s, i, rules[1]);
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < s.segments; i += blockDim.x) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t begin = cut[r][i], end = cut[r][i + 1];
      atomicMax(&longest[r], static_cast<unsigned long long>(end - begin));
      // The summary skips the segment walked last.
      walk[r][i] = i + 1 == s.segments ? 0 : end - planned_summary_begin(p, begin, end, kChunk);
      atomicMax(&longest_walk[r], static_cast<unsigned long long>(walk[r][i]));
      atomicAdd(&walked[r], static_cast<unsigned long long>(walk[r][i]));
    }
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < s.segments; i += blockDim.x) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // (a walk of zero: the segment starts a sequence, it waits for nothing)
      const float waited = i > 0 ? kSummaryStepCost * walk[r][i - 1] : 0.0f;
      atomicMax(&longest_chain[r], static_cast<unsigned long long>(cut[r][i + 1] - cut[r][i] + waited));
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const float per_step = static_cast<float>(s.channel_blocks) / (kBlocksAtFullPace * sm_count);
    const float spread = p.len * per_step;
    auto cost = [&](int r) {
      if (summary_done != nullptr) {
        return fmaxf(longest_chain[r], (p.len + kSummaryStepCost * walked[r]) * per_step);
      }
      return fmaxf(longest[r], spread) + kSummaryStepCost * longest_walk[r];
    };
    chosen = rule == 1 ? 0 : rule == 2 ? 1 : cost(1) < cost(0) ? 1 : 0;
  }
  __syncthreads();
  const int64_t* const at = cut[chosen];
  for (int64_t i = threadIdx.x; i <= s.segments; i += blockDim.x) bounds[i] = at[i];
  // The order: each segment's rank by length (ties by position), then the snake over the SMs.
  for (int64_t i = threadIdx.x; chosen == 1 && i < s.segments; i += blockDim.x) {
    const int64_t mine = at[i + 1] - at[i];
    int64_t rank = 0;
    for (int64_t j = 0; j < s.segments; ++j) {
      const int64_t other = at[j + 1] - at[j];
      rank += other > mine || (other == mine && j < i);
    }
    by_length[rank] = i;
  }
  __syncthreads();
  const int64_t blocks = s.segments * s.channel_blocks;
  for (int64_t b = threadIdx.x; summary_done != nullptr && b < blocks; b += blockDim.x) summary_done[b] = 0;
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) {
    if (chosen == 0) {
      task_of_block[b] = b;
      continue;
    }
    const int64_t tier = b / sm_count, first = tier * sm_count;
    const int64_t in_tier = blocks - first < sm_count ? blocks - first : sm_count;
    const int64_t item = tier % 2 == 0 ? b : first + in_tier - 1 - (b - first);  // in the order longest first
    task_of_block[b] = by_length[item / s.channel_blocks] * s.channel_blocks + item % s.channel_blocks;
  }
}

// The forward's place of a launched block: in a planned row, the full pass takes its
// (segment, channel block) tasks in the plan's order (the summary in launch order from
// s.first_block, which is 0 in the full pass), and the segments' planned bounds.
__device__ __forceinline__ ThreadPlace place_of_block(const SelectiveScanParams& p, const SelectiveScanShape& s,
                                                      const SegmentPlan& plan, int64_t launched_block,
                                                      bool summary) {
  const bool ordered = !summary && plan.task_of_block != nullptr;
  ThreadPlace me(p, s, ordered ? plan.task_of_block[launched_block] : launched_block, /*pair_channels=*/true);
  if (plan.bounds != nullptr) {
    me.t_begin = plan.bounds[me.segment];
    me.t_end = plan.bounds[me.segment + 1];
  }
  return me;
}

// ---- folded carries ---------------------------------------------------------------------------
// The summary pass and the full pass run at once (the full pass launched as a programmatic
// dependent of the summary, engine/dependent_launch.cuh). A summary block sets its task's flag
// once its summary is stored; a full-pass block whose segment starts inside a sequence waits
// for the flags of the segments from the one holding that sequence's start to its own, and
// folds their summaries into its carry as combine_segments_kernel does (the same operations in
// the same order: the same carry to the bit). Every summary block has started before the first
// full-pass block may (the summary allows the launch at its top), so a waiting block waits for
// blocks that run: no deadlock, whatever the order the SMs take the blocks in.

// The (segment, channel block) task of a thread's block, the index of its flag.
__device__ __forceinline__ int64_t summary_task(const SelectiveScanParams& p, const SelectiveScanShape& s,
                                                const ThreadPlace& me) {
  return me.segment * s.channel_blocks + (me.b * p.groups + me.group) * s.blocks_per_group + me.block_in_group;
}

// In the summary, once every thread of the block stored its part of the task's summary.
__device__ __forceinline__ void signal_summary_done(unsigned* flag) {
  __threadfence();  // each thread's stores, visible on the device before the flag
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // (cumulative: orders what the barrier showed thread 0 before the flag)
    atomicExch(flag, 1u);
  }
}

__device__ __forceinline__ void wait_summary_done(const unsigned* flag) {
  unsigned done = 0;
  while (true) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(done) : "l"(flag) : "memory");
#else
    done = *static_cast<const volatile unsigned*>(flag);
    __threadfence();
#endif
    if (done != 0) return;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(256);
#endif
  }
}

// The segment of a planned row that holds step t (the last one starting at or before it; empty
// segments end where they start, so this one holds t).
__device__ __forceinline__ int64_t planned_segment_of(const SelectiveScanShape& s, const SegmentPlan& plan, int64_t t) {
  int64_t lo = 0, hi = s.segments - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (plan.bounds[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Called by every thread of a full-pass block of kChannels channels of kStates states: the
// carries entering the block's segment, into plan.carries at its (segment, channel, state)
// places, where the segment starts inside a sequence (one that starts the row or a sequence
// reads none, and returns at once). Ends with the block's barrier: the carries are then visible
// to all its threads.
template <class Acc, int kChannels, int kStates>
__device__ void fold_planned_carries(const SelectiveScanParams& p, const SelectiveScanShape& s, const SegmentPlan& plan,
                                     const ThreadPlace& me) {
  const int64_t seq = p.offsets && me.t_begin > 0 ? sequence_of(p, me.t_begin) : 0;
  if (me.t_begin == 0 || p.seq_offset(seq) == me.t_begin) return;
  const int64_t first = planned_segment_of(s, plan, p.seq_offset(seq));  // its summary restarts at the sequence
  const int64_t task = summary_task(p, s, me);
  for (int64_t k = first + threadIdx.x; k < me.segment; k += blockDim.x) {
    wait_summary_done(plan.summary_done + task - (me.segment - k) * s.channel_blocks);
  }
  __syncthreads();
  const Acc* state = static_cast<const Acc*>(s.segment_state);
  const Acc* decay = static_cast<const Acc*>(s.segment_decay);
  const int64_t d0 = me.first_channel(p, s);
  const int64_t per_segment = p.batch * p.dim * p.dstate;
  for (int i = threadIdx.x; i < kChannels * kStates; i += blockDim.x) {
    const int c = i / kStates, n = i % kStates;
    if (!me.has_channel(c) || n >= p.dstate) continue;
    const int64_t at = (me.b * p.dim + d0 + c) * p.dstate + n;  // in segment 0
    Acc carry = 0;
    for (int64_t k = first; k < me.segment; ++k) {
      // L2 loads: the summaries were written by other blocks while this one ran.
      const Acc summary = __ldcg(state + k * per_segment + at), gates = __ldcg(decay + k * per_segment + at);
      carry = k == first || gates == Acc(0) ? summary : gates * carry + summary;
    }
    static_cast<Acc*>(plan.carries)[me.segment * per_segment + at] = carry;
  }
  __syncthreads();
}

}  // namespace parprims::cuda
