// The CUDA engine: picks the kernel for a problem's layout, prepares the look-back workspace
// and launches on the caller's stream (launch_context.h: no ATen here).
//
//   rows adjacent in memory, scanned dim strided, at least 2 rows -> column kernel (coalesced
//   across rows; a block walks a group of rows through time; spans when the groups are few)
//   enough rows to fill the GPU, rows at least half a tile long -> row-loop kernel (a block
//   walks a whole row; nothing crosses blocks); rows cut by packed sequences take its packed
//   instance, which marks each tile's sequence starts in shared memory
//   few rows long enough to cut into spans (one huge row, few long rows, one packed batch)
//   -> row-loop kernel over spans (spans.cuh)
//   rows shorter than a tile of the row loop's blocks, but at least a warp's tile (cheap scans
//   without packed sequences) -> row-loop kernel in one-warp blocks (WarpRowPolicy)
//   anything else (short rows) -> flat kernel
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

// Whether the environment variable `name` is set to 1 (the switches below, read once each).
inline bool env_flag_set(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && env[0] == '1';
}

// PARPRIMS_NO_WIDE_ACCESS=1 turns the wide loads and stores off (to measure what they bring).
inline bool wide_access_disabled() {
  static const bool off = env_flag_set("PARPRIMS_NO_WIDE_ACCESS");
  return off;
}

// PARPRIMS_NO_PACKED_ROWS=1 sends packed sequences to the flat kernel, as before the row loop took
// them (to measure what it brings).
inline bool packed_rows_disabled() {
  static const bool off = env_flag_set("PARPRIMS_NO_PACKED_ROWS");
  return off;
}

// PARPRIMS_NO_WARP_ROWS=1 sends short rows to the flat kernel, as before the one-warp blocks took
// them (to measure what they bring).
inline bool warp_rows_disabled() {
  static const bool off = env_flag_set("PARPRIMS_NO_WARP_ROWS");
  return off;
}

// Blocks of `kernel` (with `threads` threads) that run at once on one SM (at least one).
template <class Kernel>
int blocks_per_sm(Kernel kernel, int threads) {
  int n = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, 0));
  return n > 0 ? n : 1;
}

struct Engine {
  static constexpr bool kIsCuda = true;  // selects the accumulate type (host/scan_dispatch.h)
  LaunchContext ctx;  // the caller's device is current

  // The column kernel: a block per 32 rows, walking them in turn; with too few of those, the
  // rows are cut into spans (spans.cuh).
  template <class P>
  void launch_columns(const P& problem, const ScanGeometry& g) const {
    using K = ColumnScan<P>;
    static const int per_sm = blocks_per_sm(column_scan_kernel<P>, K::kThreads);
    const int64_t resident = int64_t{per_sm} * ctx.sm_count;
    ColumnPlan plan;
    plan.groups = (g.rows + K::kColumns - 1) / K::kColumns;
    plan.spans = plan_spans(plan.groups, g.len, K::kTileLength, resident);
    const auto grid = [&](int64_t units) { return static_cast<unsigned>(units < resident ? units : resident); };
    if (plan.spans.count > 1) {
      plan.spans.totals = allocate_span_totals<typename K::Lifted>(plan.spans, g.rows);
      column_scan_kernel<P><<<grid(plan.groups * (plan.spans.count - 1)), K::kThreads, 0, ctx.stream>>>(problem, g, plan, true);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      scan_span_totals<typename K::Seg>(plan.spans, g.rows);
    }
    column_scan_kernel<P><<<grid(plan.groups * plan.spans.count), K::kThreads, 0, ctx.stream>>>(problem, g, plan, false);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  // The row-loop kernel: blocks walking rows in turn (as many blocks as run at once, or one per
  // row: RowScan::grid); with fewer rows than kRowLoopRowsPerSM per SM, the rows are cut into spans.
  template <class P, bool kPacked, bool kWarpRows = false>
  void launch_rows(const P& problem, const ScanGeometry& g, const SpanPlan& spans, int64_t resident) const {
    using K = RowScan<P, kPacked, kWarpRows>;
    const bool wide = !wide_access_disabled();
    SpanPlan plan = spans;
    if (plan.count > 1) {
      plan.totals = allocate_span_totals<typename K::Carry>(plan, g.rows);
      row_scan_kernel<P, kPacked, kWarpRows><<<K::grid(g.rows * (plan.count - 1), resident, false), K::kThreads, 0, ctx.stream>>>(problem, g, wide, plan, true);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      scan_span_totals<typename K::CarryMonoid>(plan, g.rows);
    }
    row_scan_kernel<P, kPacked, kWarpRows><<<K::grid(g.rows * plan.count, resident, plan.count == 1), K::kThreads, 0, ctx.stream>>>(problem, g, wide, plan, false);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  // The row-loop kernel when it fits the shape (rows to fill the GPU, or rows to cut into
  // spans); false when the flat kernel should take the call.
  template <class P, bool kPacked>
  bool try_rows(const P& problem, const ScanGeometry& g) const {
    using K = RowScan<P, kPacked>;
    static const int per_sm = blocks_per_sm(row_scan_kernel<P, kPacked>, K::kThreads);
    const int64_t resident = int64_t{per_sm} * ctx.sm_count;
    if (!K::counts_fit(g)) return false;
    if (g.rows >= static_cast<int64_t>(kRowLoopRowsPerSM) * ctx.sm_count && g.len >= K::kMinRowLength) {
      launch_rows<P, kPacked>(problem, g, SpanPlan::whole_rows(g.len), resident);
      return true;
    }
    const SpanPlan spans = plan_spans(g.rows, g.len, K::kTile, resident, kPacked ? kPackedSpanWaves : kSpanWaves);
    if (spans.count <= 1) return false;
    launch_rows<P, kPacked>(problem, g, spans, resident);
    return true;
  }

  // Rows shorter than a tile of the row loop's blocks (which would leave threads idle, or not
  // take them) but at least a warp's tile: one warp a block walks whole rows
  // (WarpRowPolicy); false when the shape is not that.
  template <class P>
  bool try_warp_rows(const P& problem, const ScanGeometry& g) const {
    using W = RowScan<P, false, true>;
    if (g.len < W::kMinRowLength || g.len >= RowScan<P, false>::kTile || !W::counts_fit(g)) return false;
    static const int per_sm = blocks_per_sm(row_scan_kernel<P, false, true>, W::kThreads);
    launch_rows<P, false, true>(problem, g, SpanPlan::whole_rows(g.len), int64_t{per_sm} * ctx.sm_count);
    return true;
  }

  template <class T>
  void* allocate_span_totals(const SpanPlan& plan, int64_t rows) const {
    return ctx.workspace->allocate((plan.count - 1) * rows * sizeof(Words<T>));
  }
  template <class Mon>
  void scan_span_totals(const SpanPlan& plan, int64_t rows) const {
    const unsigned blocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);
    span_carry_kernel<Mon><<<blocks, kSpanCarryThreads, 0, ctx.stream>>>(plan, rows);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  template <class P>
  void operator()(const P& problem, const ScanGeometry& g, const ScanLayout& layout) const {
    if (g.rows == 0 || g.len == 0) return;
    if (layout.rows_adjacent && g.rows >= kMinColumnRows) return launch_columns(problem, g);
    if (g.segments.offsets == nullptr) {
      if constexpr (kWarpRows<P>) {
        if (!warp_rows_disabled() && try_warp_rows(problem, g)) return;
      }
      if (try_rows<P, false>(problem, g)) return;
    } else if constexpr (kPackedRowLoop<typename P::Value> && P::kPackedSequences) {
      if (!packed_rows_disabled() && try_rows<P, true>(problem, g)) return;
    }
    using K = FlatScan<P>;
    const int64_t total = g.rows * g.len;
    const int64_t tiles = (total + K::kTile - 1) / K::kTile;
    auto state = make_tile_state<typename K::Lifted>(ctx, tiles, tiles > 1);
    // Wide accesses are tried on every run inside one row; the problem declines strided ones.
    const bool wide = !wide_access_disabled();
    flat_scan_kernel<P><<<static_cast<unsigned>(tiles), K::kThreads, 0, ctx.stream>>>(problem, g, state, total, wide);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace parprims::cuda
