// The column kernel, for a strided scanned dimension whose neighbouring rows are adjacent in
// memory (the T of a (B, T, D) tensor): lane i of every warp scans row `32 * group + i`, so each
// load instruction reads 32 neighbouring elements; the kWarps warps of a block stack along the
// scanned dimension, kItems positions each. Tiles are (group of 32 rows) x (chunk of
// positions); chunks of a group chain through a per-row decoupled look-back.
#pragma once

#include "lookback.cuh"
#include "policy.cuh"

namespace parprims::cuda {

template <class P>
struct ColumnScan {
  using M = typename P::Monoid;
  using Seg = Segmented<M>;
  using Lifted = typename Seg::value_type;
  using Policy = ColumnPolicy<typename P::Value>;
  static constexpr int kThreads = Policy::kThreads;
  static constexpr int kWarps = Policy::kWarps;
  static constexpr int kItems = Policy::kItems;
  static constexpr int kTileLength = Policy::kTileLength;

  struct SharedStorage {
    Words<Lifted> warp_totals[kWarps][32];
    Words<Lifted> tile_prefix[32];
    unsigned long long tile;
  };

  static __device__ void run(const P& problem, const ScanGeometry& g, const TileState<Lifted>& state,
                             int64_t groups) {
    __shared__ SharedStorage smem;
    if (threadIdx.x == 0) smem.tile = state.claim_tile();
    __syncthreads();
    const int64_t tile = static_cast<int64_t>(smem.tile);
    const int64_t chunk = tile / groups;  // chunk-major: earlier chunks start first
    const int64_t group = tile - chunk * groups;
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int64_t row = group * 32 + lane;
    const bool active_row = row < g.rows;
    const int64_t first = chunk * kTileLength + static_cast<int64_t>(warp) * kItems;

    // ---- load kItems positions of this lane's row ----
    Lifted items[kItems];
    SegmentWalker walker;
    const auto cursor = problem.cursor(active_row ? row : 0);
    if (first < g.len) walker.seek(g, first);
    {
      SegmentWalker w = walker;
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int64_t pos = first + k;
        if (!active_row || pos >= g.len) {
          items[k] = Seg::identity();
          continue;
        }
        const bool head = k == 0 ? w.starts_segment(g, pos) : w.enter(g, pos);
        auto v = problem.load(cursor, g.physical_pos(pos));
        if (head) v = problem.at_head(v, row, g.physical_segment(w.segment));
        items[k] = Lifted{v, head};
      }
    }
    Lifted total = items[0];
#pragma unroll
    for (int k = 1; k < kItems; ++k) total = Seg::combine(total, items[k]);
    smem.warp_totals[warp][lane].value = total;
    __syncthreads();

    // ---- carry across the warps of the block, then across chunks by look-back ----
    Lifted warp_prefix = Seg::identity();
    for (int w = 0; w < warp; ++w) warp_prefix = Seg::combine(warp_prefix, smem.warp_totals[w][lane].value);
    if (warp == 0) {
      Lifted tile_total = Seg::identity();
      for (int w = 0; w < kWarps; ++w) tile_total = Seg::combine(tile_total, smem.warp_totals[w][lane].value);
      const int64_t slot = tile * 32 + lane;
      // Warp 0 holds the tile's first position: a head there needs no carry-in. Lanes past the
      // last row scan identities and need none either (they still publish, for their chain).
      const bool starts_with_head = !active_row || items[0].head;
      Lifted tile_prefix = Seg::identity();
      // A disabled state means a single chunk (engine.cuh): chunk == 0 everywhere, so no tile
      // looks back and nothing needs publishing.
      if (state.enabled()) state.publish(slot, tile_total, (chunk == 0 || tile_total.head) ? kPrefix : kAggregate);
      if (chunk > 0 && !starts_with_head) {
        tile_prefix = g.deterministic ? wait_for_prefix<Seg>(state, slot - groups * 32)
                                      : look_back_thread<Seg>(state, slot, group * 32 + lane, groups * 32);
        if (!tile_total.head) state.publish(slot, Seg::combine(tile_prefix, tile_total), kPrefix);
      }
      smem.tile_prefix[lane].value = tile_prefix;
    }
    __syncthreads();

    // ---- outputs ----
    if (!active_row || first >= g.len) return;
    Lifted running = Seg::combine(smem.tile_prefix[lane].value, warp_prefix);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const int64_t pos = first + k;
      if (pos >= g.len) break;
      if (k > 0) walker.enter(g, pos);
      const int64_t ppos = g.physical_pos(pos);
      const int64_t pseg = g.physical_segment(walker.segment);
      if (g.exclusive) {
        problem.store(cursor, ppos, items[k].head ? problem.exclusive_head(row, pseg) : running.value);
      }
      running = Seg::combine(running, items[k]);
      if (!g.exclusive) problem.store(cursor, ppos, running.value);
      if (walker.is_last(pos)) problem.store_final(row, pseg, running.value);
    }
  }
};

template <class P>
__global__ void __launch_bounds__(ColumnScan<P>::kThreads)
    column_scan_kernel(const P problem, const ScanGeometry g,
                       const TileState<typename ColumnScan<P>::Lifted> state, int64_t groups) {
  ColumnScan<P>::run(problem, g, state, groups);
}

}  // namespace parprims::cuda
