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
  using Policy = FlatPolicy<Value>;
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
    // 32-bit division when the sizes allow: a 64-bit one costs about as much as a tile's scan.
    r.row = (flat >> 32) == 0 && (g.len >> 32) == 0
                ? static_cast<int64_t>(static_cast<uint32_t>(flat) / static_cast<uint32_t>(g.len))
                : flat / g.len;
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

  // A thread's run: kItems values and a bit mask of the ones that start a segment.
  struct Run {
    Value values[kItems];
    uint32_t heads;
  };
  static_assert(kItems <= 32, "head masks hold 32 items");

  // ---- loading a thread's run of kItems positions ----

  // The common case: the run lies inside one row and no packed sequences cut it, so only its
  // first position can start a segment; plain indexing, wide accesses where possible.
  static __device__ __forceinline__ void load_simple(const P& problem, const ScanGeometry& g,
                                                     const RunStart& start, bool wide, Run& run) {
    const auto cursor = problem.cursor(start.row);
    const int64_t lo = g.reverse ? g.len - start.pos - kItems : start.pos;  // physical
    if (!(wide && problem.template load_run<kItems>(cursor, lo, run.values))) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) run.values[k] = problem.load(cursor, lo + k);
    }
    if (g.reverse) reverse_items(run.values);
    run.heads = start.pos == 0 ? 1u : 0u;
    if (run.heads) run.values[0] = problem.at_head(run.values[0], start.row, 0);
  }

  // Anything else: runs across rows, packed sequences, the ragged end.
  static __device__ __forceinline__ void load_general(const P& problem, const ScanGeometry& g,
                                                      const RunStart& start, int64_t first, int64_t total,
                                                      Run& run) {
    RunStart at = start;
    auto cursor = problem.cursor(at.row);
    run.heads = 0;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (first + k >= total) {
        run.values[k] = M::identity();
        continue;
      }
      const bool head = k == 0 ? at.walker.starts_segment(g, at.pos) : advance(problem, g, at, cursor);
      Value v = problem.load(cursor, g.physical_pos(at.pos));
      if (head) {
        v = problem.at_head(v, at.row, g.physical_segment(at.walker.segment));
        run.heads |= 1u << k;
      }
      run.values[k] = v;
    }
  }

  // Moves `at` one position on (into the next row if needed); true when that starts a segment.
  template <class Cursor>
  static __device__ __forceinline__ bool advance(const P& problem, const ScanGeometry& g, RunStart& at,
                                                 Cursor& cursor) {
    if (++at.pos != g.len) return at.walker.enter(g, at.pos);
    at.pos = 0;
    ++at.row;
    at.walker.seek(g, 0);
    cursor = problem.cursor(at.row);
    return true;
  }

  // The run's total under the segmented lift (a segment start inside resets it).
  static __device__ __forceinline__ Lifted run_total(const Run& run, bool simple) {
    Lifted total{run.values[0], (run.heads & 1u) != 0};
    if (simple) {  // only the first item can start a segment: a plain fold
#pragma unroll
      for (int k = 1; k < kItems; ++k) total.value = M::combine(total.value, run.values[k]);
    } else {
#pragma unroll
      for (int k = 1; k < kItems; ++k) total = Seg::combine(total, Lifted{run.values[k], ((run.heads >> k) & 1u) != 0});
    }
    return total;
  }

  // ---- writing the outputs from the thread's carry-in ----

  static __device__ __forceinline__ void store_simple(const P& problem, const ScanGeometry& g,
                                                      const RunStart& start, bool wide, Value carry, Run& run) {
    // Outputs overwrite the values in place.
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      Value exclusive = carry;
      if (k == 0 && run.heads) {
        exclusive = problem.exclusive_head(start.row, 0);
        carry = run.values[0];
      } else {
        carry = M::combine(carry, run.values[k]);
      }
      run.values[k] = g.exclusive ? exclusive : carry;
    }
    if (start.pos + kItems == g.len) problem.store_final(start.row, 0, carry);
    if (g.reverse) reverse_items(run.values);
    const auto cursor = problem.cursor(start.row);
    const int64_t lo = g.reverse ? g.len - start.pos - kItems : start.pos;
    if (!(wide && problem.template store_run<kItems>(cursor, lo, run.values))) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) problem.store(cursor, lo + k, run.values[k]);
    }
  }

  static __device__ __forceinline__ void store_general(const P& problem, const ScanGeometry& g,
                                                       const RunStart& start, int64_t first, int64_t total,
                                                       Lifted running, const Run& run) {
    RunStart at = start;
    auto cursor = problem.cursor(at.row);
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (first + k >= total) break;
      if (k > 0) advance(problem, g, at, cursor);
      const int64_t pseg = g.physical_segment(at.walker.segment);
      const bool head = ((run.heads >> k) & 1u) != 0;
      const Value exclusive = head ? problem.exclusive_head(at.row, pseg) : running.value;
      running = Seg::combine(running, Lifted{run.values[k], head});
      problem.store(cursor, g.physical_pos(at.pos), g.exclusive ? exclusive : running.value);
      if (at.walker.is_last(at.pos)) problem.store_final(at.row, pseg, running.value);
    }
  }

  // ---- the tile ----

  static __device__ void run(const P& problem, const ScanGeometry& g, const TileState<Lifted>& state,
                             int64_t total, bool wide) {
    __shared__ SharedStorage smem;
    if (threadIdx.x == 0) smem.tile = state.claim_tile();
    __syncthreads();
    const int64_t tile = static_cast<int64_t>(smem.tile);
    const int64_t first = tile * kTile + static_cast<int64_t>(threadIdx.x) * kItems;
    const bool packed = g.segments.offsets != nullptr;
    if (packed) {
      narrow_segments(smem, g, tile, total);
      __syncthreads();
    }

    Run run;
    RunStart start{};
    if (first < total) start = locate(g, first, packed ? smem.segment_range[0] : 0, packed ? smem.segment_range[1] : 0);
    const bool simple = !packed && first + kItems <= total && start.pos + kItems <= g.len;
    if (simple) load_simple(problem, g, start, wide, run);
    else load_general(problem, g, start, first, total, run);
    if (threadIdx.x == 0) smem.starts_with_head = first < total && (run.heads & 1u);

    // ---- thread totals -> block scan -> tile carry-in through the look-back ----
    Lifted tile_total;
    const Lifted thread_prefix = BlockScan<Seg, kThreads>::exclusive(smem.scan, run_total(run, simple), tile_total);

    if (threadIdx.x < 32) {
      Lifted tile_prefix = Seg::identity();
      // A disabled state means a single tile (engine.cuh): nothing to publish, no look-back.
      if (threadIdx.x == 0 && state.enabled()) {
        state.publish(tile, tile_total, (tile == 0 || tile_total.head) ? kPrefix : kAggregate);
      }
      if (tile > 0 && !smem.starts_with_head) {
        tile_prefix = g.deterministic ? shfl_idx(threadIdx.x == 0 ? wait_for_prefix<Seg>(state, tile - 1) : Seg::identity(), 0)
                                      : look_back_warp<Seg>(state, tile, 0, 1);
        if (threadIdx.x == 0 && !tile_total.head) {
          state.publish(tile, Seg::combine(tile_prefix, tile_total), kPrefix);
        }
      }
      if (threadIdx.x == 0) smem.tile_prefix.value = tile_prefix;
    }
    __syncthreads();

    if (first >= total) return;
    const Lifted running = Seg::combine(smem.tile_prefix.value, thread_prefix);
    if (simple) store_simple(problem, g, start, wide, running.value, run);
    else store_general(problem, g, start, first, total, running, run);
  }
};

template <class P>
__global__ void __launch_bounds__(FlatScan<P>::kThreads)
    flat_scan_kernel(const P problem, const ScanGeometry g,
                     const TileState<typename FlatScan<P>::Lifted> state, int64_t total,
                     bool wide) {
  FlatScan<P>::run(problem, g, state, total, wide);
}

}  // namespace parprims::cuda
