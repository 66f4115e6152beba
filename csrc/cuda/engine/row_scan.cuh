// The row-loop kernel: when there are enough rows to fill the GPU and no packed sequences cut
// them, a block owns whole rows and walks each tile by tile, every thread holding the row's
// running carry. Nothing crosses blocks, so there is no look-back state, no tile counter and
// no segmented lift (the only segment head is the row's first position), and the result is
// the same on every run (deterministic by construction).
//
// A block keeps two tiles of loads in flight: the next tile's loads are issued into registers
// before the current tile's block scan, so the barrier and the shuffles of one tile overlap
// the memory latency of the next.
#pragma once

#include "block.cuh"
#include "policy.cuh"
#include "spans.cuh"

namespace parprims::cuda {

template <class P>
struct RowScan {
  using M = typename P::Monoid;
  using Value = typename P::Value;
  using Policy = RowPolicy<Value, P::kInputBytes, kCostlyCombine<M>>;
  static constexpr int kThreads = Policy::kThreads;
  static constexpr int kItems = Policy::kItems;
  static constexpr int kTile = Policy::kTile;
  static constexpr int kMinRowLength = Policy::kMinRowLength;
  using Scan = BlockScan<M, kThreads>;
  static constexpr int kMinBlocksPerSM = Policy::kMinBlocksPerSM;

  struct SharedStorage {
    // Two, used alternately: a tile's warp totals are written while slower threads may still
    // read the previous tile's, and one barrier per tile then suffices.
    typename Scan::Storage scan[2];
  };

  // The kItems values of the run that starts at logical position `pos` of the row (identity
  // past its end), in scan order.
  template <class Cursor>
  static __device__ __forceinline__ void load(const P& problem, const ScanGeometry& g, const Cursor& cursor,
                                              int64_t pos, bool wide, Value (&values)[kItems]) {
    if (pos + kItems <= g.len) {
      const int64_t lo = g.reverse ? g.len - pos - kItems : pos;  // physical
      if (!(wide && problem.template load_run<kItems>(cursor, lo, values))) {
#pragma unroll
        for (int k = 0; k < kItems; ++k) values[k] = problem.load(cursor, lo + k);
      }
      if (g.reverse) reverse_items(values);
      return;
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      values[k] = pos + k < g.len ? problem.load(cursor, g.physical_pos(pos + k)) : M::identity();
    }
  }

  // Writes the outputs of the run at `pos` (inclusive or exclusive values, in scan order).
  template <class Cursor>
  static __device__ __forceinline__ void store(const P& problem, const ScanGeometry& g, const Cursor& cursor,
                                               int64_t pos, bool wide, Value (&values)[kItems]) {
    if (pos + kItems <= g.len) {
      if (g.reverse) reverse_items(values);
      const int64_t lo = g.reverse ? g.len - pos - kItems : pos;
      if (!(wide && problem.template store_run<kItems>(cursor, lo, values))) {
#pragma unroll
        for (int k = 0; k < kItems; ++k) problem.store(cursor, lo + k, values[k]);
      }
      return;
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (pos + k < g.len) problem.store(cursor, g.physical_pos(pos + k), values[k]);
    }
  }

  // One tile: scans `values` in place into outputs, given the carry of the tiles before it;
  // returns the carry after it.
  static __device__ __forceinline__ Value scan_tile(typename Scan::Storage& storage, const P& problem,
                                                    const ScanGeometry& g, int64_t row, int64_t pos,
                                                    Value carry, Value (&values)[kItems]) {
    const bool row_start = pos == 0;
    if (row_start) values[0] = problem.at_head(values[0], row, 0);
    Value thread_total = values[0];
#pragma unroll
    for (int k = 1; k < kItems; ++k) thread_total = M::combine(thread_total, values[k]);
    Value tile_total;
    Value running = M::combine(carry, Scan::exclusive(storage, thread_total, tile_total));
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const Value exclusive = (k == 0 && row_start) ? problem.exclusive_head(row, 0) : running;
      running = M::combine(running, values[k]);
      // The final state is the inclusive value at the last position, rounded as that output is.
      if (pos + k == g.len - 1) problem.store_final(row, 0, running);
      values[k] = g.exclusive ? exclusive : running;
    }
    return M::combine(carry, tile_total);
  }

  // A block's units of work are spans of rows, numbered span * rows + row (a row not cut into
  // spans is one unit); a unit's number is also where its span total goes (spans.cuh).
  // Rows, units and tiles of a row count in 32 bits (engine.cuh sends larger counts to the flat
  // kernel; a tensor would need 2^40 elements to reach them).
  struct Unit {
    int32_t row;
    int32_t tile;      // its first tile in the row
    int32_t end_tile;  // one past its last
  };
  // Rows not cut into spans (the dense rows' path) take no division.
  static __device__ __forceinline__ Unit locate(const ScanGeometry& g, const SpanPlan& spans, int32_t unit,
                                                int32_t tiles_per_row) {
    if (spans.count == 1) return {unit, 0, tiles_per_row};
    const int32_t rows = static_cast<int32_t>(g.rows);
    const int32_t span = unit / rows;
    const int32_t span_tiles = static_cast<int32_t>(spans.length / kTile);  // spans are whole tiles
    const int32_t first = span * span_tiles;
    return {unit - span * rows, first, first + span_tiles < tiles_per_row ? first + span_tiles : tiles_per_row};
  }
  // The carry entering a unit: nothing at a row's start and in the summary pass; in the full
  // pass, the carry out of the span before (span_carry_kernel's result).
  static __device__ __forceinline__ Value entering_carry(const ScanGeometry& g, const SpanPlan& spans, int64_t unit,
                                                        bool summary) {
    if (summary || unit < g.rows) return M::identity();
    return static_cast<const Words<Value>*>(spans.totals)[unit - g.rows].value;
  }

  // The block walks units blockIdx.x, blockIdx.x + gridDim.x, ... (a grid sized to what runs
  // at once, engine.cuh), each tile by tile; the next tile, of this unit or the next, is always
  // loaded before the current one is scanned. The summary pass (spans.cuh) stores each span's
  // total instead of its outputs, and skips each row's last span.
  static __device__ void run(const P& problem, const ScanGeometry& g, bool wide, const SpanPlan& spans, bool summary) {
    __shared__ SharedStorage smem;
    const int32_t units = static_cast<int32_t>(g.rows * (summary ? spans.count - 1 : spans.count));
    const int32_t tiles_per_row = static_cast<int32_t>((g.len + kTile - 1) / kTile);
    const int64_t offset = static_cast<int64_t>(threadIdx.x) * kItems;
    int32_t unit = blockIdx.x;
    if (unit >= units) return;
    Unit at = locate(g, spans, unit, tiles_per_row);
    auto cursor = problem.cursor(at.row);
    Value current[kItems], next[kItems];
    load(problem, g, cursor, int64_t{at.tile} * kTile + offset, wide, current);
    Value carry = entering_carry(g, spans, unit, summary);
    for (int parity = 0;; parity ^= 1) {
      int32_t next_unit = unit;
      Unit next_at{at.row, at.tile + 1, at.end_tile};
      if (next_at.tile == at.end_tile) {
        next_unit += gridDim.x;
        next_at = locate(g, spans, next_unit, tiles_per_row);
      }
      const bool more = next_unit < units;
      const auto next_cursor = next_at.row == at.row ? cursor : problem.cursor(more ? next_at.row : at.row);
      if (more) load(problem, g, next_cursor, int64_t{next_at.tile} * kTile + offset, wide, next);
      const int64_t pos = int64_t{at.tile} * kTile + offset;
      carry = scan_tile(smem.scan[parity], problem, g, at.row, pos, carry, current);
      if (!summary) store(problem, g, cursor, pos, wide, current);
      if (next_unit != unit) {
        if (summary && threadIdx.x == 0) static_cast<Words<Value>*>(spans.totals)[unit].value = carry;
        if (!more) break;
        carry = entering_carry(g, spans, next_unit, summary);
        unit = next_unit;
      }
      at = next_at;
      cursor = next_cursor;
#pragma unroll
      for (int k = 0; k < kItems; ++k) current[k] = next[k];
    }
  }
};

template <class P>
__global__ void __launch_bounds__(RowScan<P>::kThreads, RowScan<P>::kMinBlocksPerSM)
    row_scan_kernel(const P problem, const ScanGeometry g, bool wide, const SpanPlan spans, bool summary) {
  RowScan<P>::run(problem, g, wide, spans, summary);
}

}  // namespace parprims::cuda
