// Instantiations of the fused selective-scan forward (selective_scan/forward.cuh), and the
// launch shapes of both directions.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "selective_scan/dispatch.cuh"
#include "selective_scan/forward.cuh"
#include "selective_scan/forward_specialized.cuh"
#include "selective_scan/time_segments.cuh"

namespace parprims::cuda {

SelectiveScanShape selective_scan_channel_shape(const SelectiveScanParams& p, int states_per_thread,
                                                int max_threads_per_channel) {
  SelectiveScanShape s;
  while (s.threads_per_channel * states_per_thread < p.dstate && s.threads_per_channel < max_threads_per_channel) {
    s.threads_per_channel *= 2;
    ++s.log2_threads_per_channel;
  }
  s.channels_per_block = Policy::kThreads / s.threads_per_channel;
  s.states_per_tile = s.threads_per_channel * states_per_thread;
  s.state_tiles = static_cast<int>((p.dstate + s.states_per_tile - 1) / s.states_per_tile);
  s.blocks_per_group = (p.dim_per_group + s.channels_per_block - 1) / s.channels_per_block;
  s.channel_blocks = p.batch * p.groups * s.blocks_per_group;
  s.blocks = s.channel_blocks;
  return s;
}

namespace {

// Segments shorter than this spend more on the extra summary pass and the carries than the
// parallelism they add brings back.
constexpr int64_t kMinSegmentLen = 512;

bool env_is_one(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && env[0] == '1';
}

bool time_segments_disabled() {
  static const bool off = env_is_one("PARPRIMS_NO_TIME_SEGMENTS");
  return off;
}

// PARPRIMS_TIME_SEGMENTS=k asks for k segments a row (at most one per kMinSegmentLen steps) in
// every call whose rows are long enough to cut, forward and backward, whether or not the blocks
// over channels fill the GPU (a diagnostic: how the count moves a shape's time); 0 or unset:
// the count below.
int64_t time_segments_asked() {
  static const int64_t asked = [] {
    const char* env = std::getenv("PARPRIMS_TIME_SEGMENTS");
    return env != nullptr ? std::atoll(env) : int64_t{0};
  }();
  return asked;
}

// PARPRIMS_TIME_SEGMENT_CUTS=uniform or =starts takes those cuts in the forward's packed rows,
// whatever the plan's costs (1, 2; 0 unset: the plan's choice).
int segment_cuts_asked() {
  static const int rule = [] {
    const char* env = std::getenv("PARPRIMS_TIME_SEGMENT_CUTS");
    const std::string asked = env != nullptr ? env : "";
    return asked == "uniform" ? 1 : asked == "starts" ? 2 : 0;
  }();
  return rule;
}

// PARPRIMS_NO_FOLDED_CARRIES=1 keeps the combine pass between the summary and the full pass of
// packed rows (a diagnostic, and the baseline the folded carries are measured against).
bool folded_carries_disabled() {
  static const bool off = env_is_one("PARPRIMS_NO_FOLDED_CARRIES");
  return off;
}

bool plans_time_segments(const SelectiveScanParams& p, const SelectiveScanShape& s) {
  return s.segments > 1 && p.offsets != nullptr && s.segments <= kMaxPlannedSegments;
}

// The plan of a packed row cut into time segments (time_segments.cuh), on the device, in the
// call's workspace, with the flags and carries of folded carries when `folds`; an empty plan
// (uniform cuts) for other rows.
template <class Acc>
SegmentPlan plan_time_segments(const LaunchContext& ctx, const SelectiveScanParams& p, const SelectiveScanShape& s,
                               bool folds) {
  if (!plans_time_segments(p, s)) return {};
  auto allocate = [&](int64_t count, size_t size) {
    return ctx.workspace->allocate(static_cast<size_t>(count) * size);
  };
  SegmentPlan plan;
  plan.bounds = static_cast<int64_t*>(allocate(s.segments + 1, sizeof(int64_t)));
  plan.task_of_block = static_cast<int64_t*>(allocate(s.blocks, sizeof(int64_t)));
  if (folds) {
    plan.summary_done = static_cast<unsigned*>(allocate(s.blocks, sizeof(unsigned)));
    plan.carries = allocate(s.segments * p.batch * p.dim * p.dstate, sizeof(Acc));
  }
  plan_time_segments_kernel<Policy::kForwardChunk><<<1, 128, 0, ctx.stream>>>(
      p, s, segment_cuts_asked(), ctx.sm_count, const_cast<int64_t*>(plan.bounds),
      const_cast<int64_t*>(plan.task_of_block), plan.summary_done);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return plan;
}

}  // namespace

// As many segments as keep the blocks within one wave of the GPU (every block then runs at
// once, and segments of equal length end together); none when the channel blocks alone fill
// half of it.
void add_time_segments(SelectiveScanShape& s, const SelectiveScanParams& p, int64_t resident) {
  if (s.channel_blocks == 0 || p.len < 2 * kMinSegmentLen) return;  // no rows, or rows too short
  const int64_t wanted = time_segments_asked() > 0 ? time_segments_asked() : resident / s.channel_blocks;
  const int64_t most = p.len / kMinSegmentLen;
  const int64_t segments = wanted < most ? wanted : most;
  if (segments < 2 || time_segments_disabled()) return;
  const int64_t len = (p.len + segments - 1) / segments;
  s.segment_len = (len + kSegmentAlign - 1) / kSegmentAlign * kSegmentAlign;
  s.segments = (p.len + s.segment_len - 1) / s.segment_len;
  s.blocks = s.channel_blocks * s.segments;
}

template <class In, class Acc, bool kVariableBC, bool kSummary, int kThreadsPerChannel = 0, int kStepsPerItem = 1>
constexpr auto forward_kernel() {
  return selective_scan_forward_kernel<In, Acc, kVariableBC, kSummary, kThreadsPerChannel, kStepsPerItem>;
}

// The instance for Mamba's shapes: B and C both variable, N = 16 (4 threads a channel, one tile)
// in float compute; two steps an item where the inputs are contiguous in time and the length
// even, one otherwise (odd lengths, (batch, L, dim) views). The general instance for the rest.
constexpr int kMambaThreads = 16 / Policy::kForwardStatesPerThread;  // N = 16

template <class Acc>
bool takes_mamba_instance(const SelectiveScanParams& p, const SelectiveScanShape& s) {
  return sizeof(Acc) == 4 && p.B.variable && p.C.variable && s.threads_per_channel == kMambaThreads &&
         s.state_tiles == 1;
}

template <class In, class Acc, bool kSummary>
auto pick_forward_kernel(const SelectiveScanParams& p, const SelectiveScanShape& s) {
  if constexpr (sizeof(Acc) == 4) {
    if (takes_mamba_instance<Acc>(p, s)) {
      return steps_in_pairs<In>(p) ? forward_kernel<In, Acc, true, kSummary, kMambaThreads, 2>()
                                   : forward_kernel<In, Acc, true, kSummary, kMambaThreads, 1>();
    }
  }
  const bool both = p.B.variable && p.C.variable;
  return both ? forward_kernel<In, Acc, true, kSummary>() : forward_kernel<In, Acc, false, kSummary>();
}

// PARPRIMS_NO_SPECIALIZED_FORWARD=1 runs the plain forward where the warp-specialized one would
// run (a diagnostic: what the specialization brings).
bool specialized_forward_disabled() {
  static const bool off = env_is_one("PARPRIMS_NO_SPECIALIZED_FORWARD");
  return off;
}

// The warp-specialized forward (forward_specialized.cuh) takes the full pass of Mamba's instance
// at N = 16 exactly, for rows that fill the GPU and for packed rows; the summary passes of time
// segments stay with the plain kernel. Long rows without packed sequences keep the plain full
// pass too: its 128-thread blocks fit 4 an SM where the specialized kernel's fit 3, so they
// allow more segments, and the summary's time follows the segments' length (H100, (2, 1536,
// 16384, 16) bfloat16: 0.704 ms plain at 5 segments, 0.722 specialized at 4; benchmarks/NOTES.md).
template <class Acc>
bool specialized_forward_fits(const SelectiveScanParams& p, const SelectiveScanShape& s) {
  return takes_mamba_instance<Acc>(p, s) && p.dstate == SpecializedForward::kTileStates &&
         !specialized_forward_disabled();
}

template <class Acc>
bool takes_specialized_forward(const SelectiveScanParams& p, const SelectiveScanShape& s) {
  return specialized_forward_fits<Acc>(p, s) && (s.segments == 1 || p.offsets != nullptr);
}

// Whether the specialized full pass folds the carries of a packed row's segments beside the
// summary pass (time_segments.cuh) instead of after a combine pass: the combine pass and the
// summary's wave came to about a quarter of the packed row's forward (H100, bfloat16, 8
// sequences of 32 to 2350 tokens at dim 1536: plan 6 us, summary 52 us, combine 5 us, full pass
// 217 us), and with them out of the way the row may take more, shorter segments.
template <class Acc>
bool folds_carries(const SelectiveScanParams& p, const SelectiveScanShape& s) {
  return takes_specialized_forward<Acc>(p, s) && plans_time_segments(p, s) && !folded_carries_disabled();
}

// With folded carries, a packed row that is cut at all takes this many times the segments of one
// wave: the summaries no longer come before the full pass, so shorter segments shorten the
// longest chain of a segment after the summary it waits for.
constexpr int64_t kFoldedSegmentsPerWave = 2;

template <class In, class Acc, bool kFolds = false>
auto pick_specialized_forward_kernel(const SelectiveScanParams& p) {
  return steps_in_pairs<In>(p) ? selective_scan_forward_specialized_kernel<In, Acc, 2, kFolds>
                               : selective_scan_forward_specialized_kernel<In, Acc, 1, kFolds>;
}

// The dynamic shared memory of the instance pick_forward_kernel takes (only the fixed instance
// sums y in its step loop: ForwardChunk::smem_bytes).
template <class In, class Acc>
size_t forward_smem_bytes(const SelectiveScanParams& p, const SelectiveScanShape& s) {
  return ForwardChunk<In, Acc>::smem_bytes(s, p.B.variable, p.C.variable, takes_mamba_instance<Acc>(p, s));
}

SelectiveScanShape selective_scan_forward_shape(const SelectiveScanParams& p, c10::ScalarType input_dtype,
                                                const LaunchContext& ctx) {
  auto s = selective_scan_channel_shape(p, Policy::kForwardStatesPerThread);
  visit_selective_scan_types(input_dtype, [&](auto in, auto acc) {
    using In = decltype(in);
    using Acc = decltype(acc);
    // Segments enough for one wave of the kernel that runs the full pass.
    int64_t resident = 0;
    if constexpr (sizeof(Acc) == 4) {
      if (p.offsets != nullptr && specialized_forward_fits<Acc>(p, s)) {
        resident = resident_blocks(ctx, pick_specialized_forward_kernel<In, Acc>(p), SpecializedForward::smem_bytes(),
                                   SpecializedForward::kBlockThreads);
      }
    }
    if (resident == 0) {
      resident = resident_blocks(ctx, forward_kernel<In, Acc, false, false>(), forward_smem_bytes<In, Acc>(p, s));
    }
    add_time_segments(s, p, resident);
    if (s.segments > 1 && folds_carries<Acc>(p, s) && time_segments_asked() == 0) {
      SelectiveScanShape more = selective_scan_channel_shape(p, Policy::kForwardStatesPerThread);
      add_time_segments(more, p, kFoldedSegmentsPerWave * resident);
      if (folds_carries<Acc>(p, more)) s = more;  // (not past the plan's most segments)
    }
  });
  return s;
}

void launch_selective_scan_forward(const SelectiveScanParams& p, const SelectiveScanShape& shape,
                                   c10::ScalarType input_dtype, const LaunchContext& ctx) {
  visit_selective_scan_types(input_dtype, [&](auto in, auto acc) {
    using In = decltype(in);
    using Acc = decltype(acc);
    const size_t smem = forward_smem_bytes<In, Acc>(p, shape);
    const bool folds = folds_carries<Acc>(p, shape);
    const SegmentPlan plan = plan_time_segments<Acc>(ctx, p, shape, folds);
    run_time_segments<Acc>(
        ctx, shape, p, /*reverse=*/false,
        [&](const SelectiveScanShape& s) {
          launch_blocks(ctx, pick_forward_kernel<In, Acc, true>(p, s), smem, s.blocks, p, s, plan);
        },
        [&](const SelectiveScanShape& s) {
          if constexpr (sizeof(Acc) == 4) {
            if (folds) {
              return launch_blocks_after(SpecializedForward::kBlockThreads, ctx,
                                         pick_specialized_forward_kernel<In, Acc, true>(p),
                                         SpecializedForward::smem_bytes(), s.blocks, p, s, plan);
            }
            if (takes_specialized_forward<Acc>(p, s)) {
              return launch_blocks_of(SpecializedForward::kBlockThreads, ctx, pick_specialized_forward_kernel<In, Acc>(p),
                                      SpecializedForward::smem_bytes(), s.blocks, p, s, plan);
            }
          }
          launch_blocks(ctx, pick_forward_kernel<In, Acc, false>(p, s), smem, s.blocks, p, s, plan);
        },
        folds ? CarryJoin::kFullPass : CarryJoin::kCombinePass);
  });
}

}  // namespace parprims::cuda
