// The CUDA engine: picks the kernel for a problem's layout, prepares the look-back workspace
// and launches on the caller's stream (launch_context.h: no ATen here).
//
//   rows adjacent in memory, scanned dim strided, at least 2 rows -> column kernel (coalesced
//   across rows; a block walks a group of rows through time)
//   no packed sequences, enough rows to fill the GPU, rows at least half a tile long -> row-loop
//   kernel (a block walks a whole row; nothing crosses blocks)
//   anything else (one huge row, few long rows, packed sequences, short rows) -> flat kernel
#pragma once

#include <c10/cuda/CUDAException.h>

#include <cstdlib>

#include "../launch_context.h"
#include "column_scan.cuh"
#include "flat_scan.cuh"
#include "row_scan.cuh"

namespace parprims::cuda {

// The look-back workspace of `tiles` tiles from the call's workspace, its counter and flags
// zeroed on the call's stream. Launches whose tiles never look back (a single tile) need none:
// they get a disabled state (lookback.cuh), which spares the allocation and the memset.
template <class Lifted>
TileState<Lifted> make_tile_state(const LaunchContext& ctx, int64_t tiles, bool needed) {
  using State = TileState<Lifted>;
  if (!needed) return State{};
  void* memory = ctx.workspace->allocate(State::bytes(tiles));
  C10_CUDA_CHECK(cudaMemsetAsync(memory, 0, State::zeroed_bytes(tiles), ctx.stream));
  return State::at(memory, tiles);
}

// PARPRIMS_NO_WIDE_ACCESS=1 turns the wide loads and stores off (to measure what they bring).
inline bool wide_access_disabled() {
  static const bool off = [] {
    const char* env = std::getenv("PARPRIMS_NO_WIDE_ACCESS");
    return env != nullptr && env[0] == '1';
  }();
  return off;
}

// Whether the row-loop kernel serves a problem: no packed sequences, enough rows to give every
// SM blocks of its own, and rows of half a tile or more (that keep most of a block's threads
// busy; shorter rows go to the flat kernel, which packs several into one tile).
template <class P>
bool use_row_loop(const ScanGeometry& g, int sm_count) {
  if (g.segments.offsets != nullptr) return false;
  return g.rows >= static_cast<int64_t>(kRowLoopRowsPerSM) * sm_count && g.len * 2 >= RowScan<P>::kTile;
}

// Blocks of `kernel` (with `threads` threads) that run at once on one SM (at least one).
template <class Kernel>
int blocks_per_sm(Kernel kernel, int threads) {
  int n = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0));
  return n > 0 ? n : 1;
}

// The column kernel's plan (column_scan.cuh): a block per 32 rows, and spans when those blocks
// would fill less than kColumnSingleSlotsFraction of the GPU's block slots over their waves.
template <class P>
ColumnPlan plan_columns(const ScanGeometry& g, int64_t resident) {
  using K = ColumnScan<P>;
  ColumnPlan plan;
  plan.groups = (g.rows + K::kColumns - 1) / K::kColumns;
  plan.span_length = g.len;
  const int64_t waves = (plan.groups + resident - 1) / resident;
  if (static_cast<double>(plan.groups) >= kColumnSingleSlotsFraction * static_cast<double>(waves * resident)) {
    return plan;
  }
  const int64_t tiles = (g.len + K::kTileLength - 1) / K::kTileLength;
  int64_t spans = (kColumnSpanWaves * resident + plan.groups - 1) / plan.groups;
  if (spans > tiles / kColumnMinSpanTiles) spans = tiles / kColumnMinSpanTiles;
  if (spans <= 1) return plan;
  plan.span_length = (tiles + spans - 1) / spans * K::kTileLength;
  plan.spans = (g.len + plan.span_length - 1) / plan.span_length;
  return plan;
}

struct Engine {
  static constexpr bool kIsCuda = true;  // selects the accumulate type (host/scan_dispatch.h)
  LaunchContext ctx;  // the caller's device is current

  // The column kernel: the summary pass first when rows are cut into spans, then the full pass;
  // each with as many blocks as run at once (or one per unit), walking units in turn.
  template <class P>
  void launch_columns(const P& problem, const ScanGeometry& g) const {
    using K = ColumnScan<P>;
    static const int per_sm = blocks_per_sm(column_scan_kernel<P>, K::kThreads);
    const int64_t resident = int64_t{per_sm} * ctx.sm_count;
    ColumnPlan plan = plan_columns<P>(g, resident);
    const auto grid = [&](int64_t units) { return static_cast<unsigned>(units < resident ? units : resident); };
    if (plan.spans > 1) {
      plan.span_totals = ctx.workspace->allocate((plan.spans - 1) * g.rows * sizeof(Words<typename K::Lifted>));
      column_scan_kernel<P><<<grid(plan.groups * (plan.spans - 1)), K::kThreads, 0, ctx.stream>>>(problem, g, plan, true);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      const unsigned carry_blocks = static_cast<unsigned>(g.rows < 65535 ? g.rows : 65535);
      column_span_carry_kernel<P><<<carry_blocks, kSpanCarryThreads, 0, ctx.stream>>>(plan, g.rows);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    column_scan_kernel<P><<<grid(plan.groups * plan.spans), K::kThreads, 0, ctx.stream>>>(problem, g, plan, false);
  }

  template <class P>
  void operator()(const P& problem, const ScanGeometry& g, const ScanLayout& layout) const {
    if (g.rows == 0 || g.len == 0) return;
    const cudaStream_t stream = ctx.stream;
    if (layout.rows_adjacent && g.rows >= kMinColumnRows) {
      launch_columns(problem, g);
    } else if (use_row_loop<P>(g, ctx.sm_count)) {
      // As many blocks as run at once (or one per row): each walks its rows in turn.
      static const int per_sm = blocks_per_sm(row_scan_kernel<P>, RowScan<P>::kThreads);
      const int64_t resident = int64_t{per_sm} * ctx.sm_count;
      const int64_t blocks = g.rows < resident ? g.rows : resident;
      row_scan_kernel<P><<<static_cast<unsigned>(blocks), RowScan<P>::kThreads, 0, stream>>>(
          problem, g, !wide_access_disabled());
    } else {
      using K = FlatScan<P>;
      const int64_t total = g.rows * g.len;
      const int64_t tiles = (total + K::kTile - 1) / K::kTile;
      auto state = make_tile_state<typename K::Lifted>(ctx, tiles, tiles > 1);
      // Wide accesses are tried on every run inside one row; the problem declines strided ones.
      const bool wide = !wide_access_disabled();
      flat_scan_kernel<P><<<static_cast<unsigned>(tiles), K::kThreads, 0, stream>>>(problem, g, state, total, wide);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace parprims::cuda
