// The CUDA engine: picks the kernel for a problem's layout, prepares the look-back workspace
// and launches on the caller's stream (launch_context.h: no ATen here).
//
//   rows adjacent in memory, scanned dim strided, at least 2 rows -> column kernel (coalesced
//   across rows)
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

struct Engine {
  static constexpr bool kIsCuda = true;  // selects the accumulate type (host/scan_dispatch.h)
  LaunchContext ctx;  // the caller's device is current

  template <class P>
  void operator()(const P& problem, const ScanGeometry& g, const ScanLayout& layout) const {
    if (g.rows == 0 || g.len == 0) return;
    const cudaStream_t stream = ctx.stream;
    if (layout.rows_adjacent && g.rows >= kMinColumnRows) {
      using K = ColumnScan<P>;
      const int64_t groups = (g.rows + 31) / 32;
      const int64_t chunks = (g.len + K::kTileLength - 1) / K::kTileLength;
      const int64_t tiles = groups * chunks;
      // Chunks chain through the look-back; one chunk per group needs none.
      auto state = make_tile_state<typename K::Lifted>(ctx, tiles * 32, chunks > 1);
      column_scan_kernel<P><<<static_cast<unsigned>(tiles), K::kThreads, 0, stream>>>(problem, g, state, groups);
    } else if (use_row_loop<P>(g, ctx.sm_count)) {
      // As many blocks as run at once (or one per row): each walks its rows in turn.
      static const int blocks_per_sm = [] {
        int n = 0;
        C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, row_scan_kernel<P>, RowScan<P>::kThreads, 0));
        return n;
      }();
      const int64_t resident = int64_t{blocks_per_sm} * ctx.sm_count;
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
