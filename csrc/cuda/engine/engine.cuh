// The CUDA engine: picks the kernel for a problem's layout, prepares the look-back workspace
// from PyTorch's caching allocator and launches on the current stream.
//
//   rows adjacent in memory, scanned dim strided, at least 32 rows -> column kernel (coalesced
//   across rows; fewer rows would leave most lanes of its warps idle)
//   anything else (contiguous rows, one huge row, packed sequences, odd strides) -> flat kernel
#pragma once

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdlib>

#include "column_scan.cuh"
#include "flat_scan.cuh"

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
