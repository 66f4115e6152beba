// The one policy table: threads per block and items per thread of every CUDA scan kernel.
// Larger scanned values (affine pairs, small matrices) take fewer items per thread, so that
// registers and shared memory stay bounded.
#pragma once

namespace parprims::cuda {

template <class Lifted>
struct FlatPolicy {
  static constexpr int kBytes = static_cast<int>(sizeof(Lifted));
  static constexpr int kThreads = kBytes > 64 ? 64 : 256;
  static constexpr int kItems = kBytes <= 8 ? 8 : kBytes <= 16 ? 4 : kBytes <= 32 ? 2 : 1;
  static constexpr int kTile = kThreads * kItems;
};

// Column scans: 32 neighbouring rows per warp (one per lane), kWarps warps stacked along the
// scanned dimension, kItems positions per thread.
template <class Lifted>
struct ColumnPolicy {
  static constexpr int kBytes = static_cast<int>(sizeof(Lifted));
  static constexpr int kWarps = kBytes > 256 ? 1 : kBytes > 64 ? 2 : 8;
  static constexpr int kItems = kBytes <= 8 ? 8 : kBytes <= 16 ? 4 : kBytes <= 32 ? 2 : 1;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kChunk = kWarps * kItems;  // positions per tile
};

}  // namespace parprims::cuda
