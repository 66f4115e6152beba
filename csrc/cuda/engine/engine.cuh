// The CUDA engine: picks the kernel for a problem's layout, prepares the look-back workspace
// from PyTorch's caching allocator and launches on the current stream.
//
//   rows adjacent in memory, scanned dim strided, at least 2 rows -> column kernel (coalesced
//   across rows)
//   no packed sequences, enough rows to fill the GPU, rows at least half a tile long -> row-loop
//   kernel (a block walks a whole row; nothing crosses blocks)
//   anything else (one huge row, few long rows, packed sequences, short rows) -> flat kernel
#pragma once

#include <ATen/ops/empty.h>
#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdlib>

#include "column_scan.cuh"
#include "flat_scan.cuh"
#include "row_scan.cuh"

namespace parprims::cuda {

// The look-back workspace of `tiles` tiles from PyTorch's caching allocator, its counter and
// flags zeroed on the current stream. Launches whose tiles never look back (a single tile) need
// none: they get a disabled state (lookback.cuh), which spares the allocation and the memset.
template <class Lifted>
TileState<Lifted> make_tile_state(const at::Tensor& like, int64_t tiles, bool needed, at::Tensor& holder) {
  using State = TileState<Lifted>;
  if (!needed) return State{};
  holder = at::empty({static_cast<int64_t>(State::bytes(tiles))}, like.options().dtype(at::kByte));
  C10_CUDA_CHECK(cudaMemsetAsync(holder.data_ptr(), 0, State::zeroed_bytes(tiles),
                                 at::cuda::getCurrentCUDAStream()));
  return State::at(holder.data_ptr(), tiles);
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
bool use_row_loop(const ScanGeometry& g) {
  if (g.segments.offsets != nullptr) return false;
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return g.rows >= static_cast<int64_t>(kRowLoopRowsPerSM) * sms && g.len * 2 >= RowScan<P>::kTile;
}

struct Engine {
  static constexpr bool kIsCuda = true;  // selects the accumulate type (host/scan_dispatch.h)
  at::Tensor like;  // any tensor on the target device (for the workspace's options)

  template <class P>
  void operator()(const P& problem, const ScanGeometry& g, const ScanLayout& layout) const {
    if (g.rows == 0 || g.len == 0) return;
    const c10::cuda::CUDAGuard guard(like.device());
    auto stream = at::cuda::getCurrentCUDAStream();
    at::Tensor workspace;
    if (layout.rows_adjacent && g.rows >= kMinColumnRows) {
      using K = ColumnScan<P>;
      const int64_t groups = (g.rows + 31) / 32;
      const int64_t chunks = (g.len + K::kTileLength - 1) / K::kTileLength;
      const int64_t tiles = groups * chunks;
      // Chunks chain through the look-back; one chunk per group needs none.
      auto state = make_tile_state<typename K::Lifted>(like, tiles * 32, chunks > 1, workspace);
      column_scan_kernel<P><<<static_cast<unsigned>(tiles), K::kThreads, 0, stream>>>(problem, g, state, groups);
    } else if (use_row_loop<P>(g)) {
      // As many blocks as run at once (or one per row): each walks its rows in turn.
      static const int blocks_per_sm = [] {
        int n = 0;
        C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, row_scan_kernel<P>, RowScan<P>::kThreads, 0));
        return n;
      }();
      const int64_t resident = int64_t{blocks_per_sm} * at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
      const int64_t blocks = g.rows < resident ? g.rows : resident;
      row_scan_kernel<P><<<static_cast<unsigned>(blocks), RowScan<P>::kThreads, 0, stream>>>(
          problem, g, !wide_access_disabled());
    } else {
      using K = FlatScan<P>;
      const int64_t total = g.rows * g.len;
      const int64_t tiles = (total + K::kTile - 1) / K::kTile;
      auto state = make_tile_state<typename K::Lifted>(like, tiles, tiles > 1, workspace);
      // Wide accesses are tried on every run inside one row; the problem declines strided ones.
      const bool wide = !wide_access_disabled();
      flat_scan_kernel<P><<<static_cast<unsigned>(tiles), K::kThreads, 0, stream>>>(problem, g, state, total, wide);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
};

}  // namespace parprims::cuda
