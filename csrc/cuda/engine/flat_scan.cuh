// The flat kernel: rows laid end to end form one logical sequence, cut into tiles of
// kThreads * kItems consecutive positions; row starts and packed-sequence starts are segment
// heads of the segmented lift, so one decoupled look-back chain serves one huge row, few long
// rows and many short rows alike. Each thread scans kItems consecutive positions sequentially
// (thread coarsening), the block scans the thread totals, the look-back supplies the tile's
// carry-in.
#pragma once

#include "block.cuh"
#include "lookback.cuh"
#include "policy.cuh"

namespace parprims::cuda {

template <class T, int N>
__device__ __forceinline__ void reverse_items(T (&items)[N]) {
#pragma unroll
  for (int k = 0; k < N / 2; ++k) {
    const T tmp = items[k];
    items[k] = items[N - 1 - k];
    items[N - 1 - k] = tmp;
  }
}

// Where a thread's run of positions starts: row, position in the row, and segment walker.
struct RunStart {
  int64_t row;
  int64_t pos;
  SegmentWalker walker;
};

template <class P>
struct FlatScan {
  using M = typename P::Monoid;
  using Seg = Segmented<M>;
  using Lifted = typename Seg::value_type;
  using Value = typename P::Value;
  using Policy = FlatPolicy<Lifted>;
  static constexpr int kThreads = Policy::kThreads;
  static constexpr int kItems = Policy::kItems;
  static constexpr int kTile = Policy::kTile;

  struct SharedStorage {
    typename BlockScan<Seg, kThreads>::Storage scan;
    Words<Lifted> tile_prefix;
    unsigned long long tile;
    int64_t segment_range[2];
    bool starts_with_head;
  };

  // The row, position and segment of a flat position: one division, and a binary search
  // over the segments in [lo, hi].
  static __device__ __forceinline__ RunStart locate(const ScanGeometry& g, int64_t flat, int64_t lo,
                                                    int64_t hi) {
    RunStart r;
    r.row = flat / g.len;
    r.pos = flat - r.row * g.len;
    r.walker.seek(g, r.pos, lo, hi);
    return r;
  }

  // The segments a tile can touch: with packed sequences and a tile inside one row, two
  // threads find the segments of its first and last positions, so that every thread searches
  // only between them (a tile usually spans a few sequences among thousands).
  static __device__ __forceinline__ void narrow_segments(SharedStorage& smem, const ScanGeometry& g,
                                                         int64_t tile, int64_t total) {
    const int64_t begin = tile * kTile;
    const int64_t end = (begin + kTile < total ? begin + kTile : total) - 1;
    const bool one_row = begin / g.len == end / g.len;
    if (threadIdx.x < 2) {
      int64_t segment = 0;
      if (one_row && g.segments.offsets != nullptr) {
        const int64_t flat = threadIdx.x == 0 ? begin : end;
        SegmentWalker w;
        w.seek(g, flat - (flat / g.len) * g.len);
        segment = w.segment;
      } else {
        segment = threadIdx.x == 0 ? 0 : g.num_segments() - 1;
      }
      smem.segment_range[threadIdx.x] = segment;
    }
  }

  static __device__ void run(const P& problem, const ScanGeometry& g, const TileState<Lifted>& state,
                             int64_t total, bool dense) {
    __shared__ SharedStorage smem;
    if (threadIdx.x == 0) smem.tile = atomicAdd(state.counter, 1ull);
    __syncthreads();
    const int64_t tile = static_cast<int64_t>(smem.tile);
    const int64_t first = tile * kTile + static_cast<int64_t>(threadIdx.x) * kItems;
    narrow_segments(smem, g, tile, total);
    __syncthreads();

    // ---- load kItems consecutive positions, with their head flags ----
    Lifted items[kItems];
    RunStart start{};
    if (first < total) start = locate(g, first, smem.segment_range[0], smem.segment_range[1]);
    // A run inside one row of a dense layout is read and written with wide accesses.
    const bool wide = dense && first + kItems <= total && start.pos + kItems <= g.len;
    const int64_t wide_lo = g.reverse ? g.len - start.pos - kItems : start.pos;  // physical
    {
      RunStart at = start;
      auto cursor = problem.cursor(at.row);
      Value values[kItems];
      bool have_values = wide && problem.template load_run<kItems>(cursor, wide_lo, values);
      if (have_values && g.reverse) reverse_items(values);
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int64_t flat = first + k;
        if (flat >= total) {
          items[k] = Seg::identity();
          continue;
        }
        bool head;
        if (k == 0) {
          head = at.walker.starts_segment(g, at.pos);
        } else if (++at.pos == g.len) {
          at.pos = 0;
          ++at.row;
          at.walker.seek(g, 0);
          cursor = problem.cursor(at.row);
          head = true;
        } else {
          head = at.walker.enter(g, at.pos);
        }
        Value v = have_values ? values[k] : problem.load(cursor, g.physical_pos(at.pos));
        if (head) v = problem.at_head(v, at.row, g.physical_segment(at.walker.segment));
        items[k] = Lifted{v, head};
      }
    }
    if (threadIdx.x == 0) smem.starts_with_head = first < total && items[0].head;

    // ---- thread totals -> block scan -> tile carry-in through the look-back ----
    Lifted thread_total = items[0];
#pragma unroll
    for (int k = 1; k < kItems; ++k) thread_total = Seg::combine(thread_total, items[k]);
    Lifted tile_total;
    const Lifted thread_prefix = BlockScan<Seg, kThreads>::exclusive(smem.scan, thread_total, tile_total);

    if (threadIdx.x < 32) {
      Lifted tile_prefix = Seg::identity();
      if (tile == 0 || tile_total.head) {
        if (threadIdx.x == 0) state.publish(tile, tile_total, kPrefix);
      } else if (threadIdx.x == 0) {
        state.publish(tile, tile_total, kAggregate);
      }
      if (tile > 0 && !smem.starts_with_head) {
        tile_prefix = look_back_warp<Seg>(state, tile, 0, 1);
        if (threadIdx.x == 0 && !tile_total.head) {
          state.publish(tile, Seg::combine(tile_prefix, tile_total), kPrefix);
        }
      }
      if (threadIdx.x == 0) smem.tile_prefix.value = tile_prefix;
    }
    __syncthreads();

    // ---- outputs: rescan the registers from the carry-in ----
    if (first >= total) return;
    Lifted running = Seg::combine(smem.tile_prefix.value, thread_prefix);
    RunStart at = start;
    const auto first_cursor = problem.cursor(at.row);
    auto cursor = first_cursor;
    Value outs[kItems];
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (first + k >= total) break;
      if (k > 0) {
        if (++at.pos == g.len) {
          at.pos = 0;
          ++at.row;
          at.walker.seek(g, 0);
          cursor = problem.cursor(at.row);
        } else {
          at.walker.enter(g, at.pos);
        }
      }
      const int64_t pseg = g.physical_segment(at.walker.segment);
      const Value exclusive = items[k].head ? problem.exclusive_head(at.row, pseg) : running.value;
      running = Seg::combine(running, items[k]);
      const Value out = g.exclusive ? exclusive : running.value;
      if (wide) outs[k] = out;
      else problem.store(cursor, g.physical_pos(at.pos), out);
      if (problem.has_final && at.walker.is_last(at.pos)) problem.store_final(at.row, pseg, running.value);
    }
    if (wide) {
      if (g.reverse) reverse_items(outs);
      if (!problem.template store_run<kItems>(first_cursor, wide_lo, outs)) {
#pragma unroll
        for (int k = 0; k < kItems; ++k) problem.store(first_cursor, wide_lo + k, outs[k]);
      }
    }
  }
};

template <class P>
__global__ void __launch_bounds__(FlatScan<P>::kThreads)
    flat_scan_kernel(const P problem, const ScanGeometry g,
                     const TileState<typename FlatScan<P>::Lifted> state, int64_t total,
                     bool dense) {
  FlatScan<P>::run(problem, g, state, total, dense);
}

}  // namespace parprims::cuda
