// The row-loop kernel: when there are enough rows to fill the GPU (or rows long enough to cut
// into spans), a block owns whole rows and walks each tile by tile, every thread holding the
// row's running carry. Nothing crosses blocks, so there is no look-back state and no tile
// counter, and the result is the same on every run (deterministic by construction).
//
// A block keeps two tiles of loads in flight: the next tile's loads are issued into registers
// before the current tile's block scan, so the barrier and the shuffles of one tile overlap
// the memory latency of the next. Nothing read from memory after those loads were issued may
// be used before the next tile, or the use waits for them too (all of a thread's global loads
// share one scoreboard): a row's initial state is read before them (enter_row), a span's
// entering carry is settled where it is read (settled_uniform), and a row's store cursor is
// the one its loads used. (With the wait in mid-tile, the bfloat16 affine forward ran at 0.72
// of copy bandwidth; without it, 0.84: benchmarks/NOTES.md.)
//
// Rows cut by packed sequences (`kPacked`: run_packed; other rows take run_dense) take the same
// walk. Before scanning a tile, the block marks the tile's sequence starts and ends in shared bit
// masks (packed_tiles.cuh); the block scan runs on lifted values (a start inside a thread's run
// resets its sum), and the carry between tiles and spans remembers whether a sequence started
// (spans.cuh scans the span totals with the same lift).
#pragma once

#include <type_traits>

#include "block.cuh"
#include "held_run.cuh"
#include "packed_tiles.cuh"
#include "policy.cuh"
#include "segment_search.cuh"
#include "spans.cuh"

namespace parprims::cuda {

// kWarpRows: the one-warp blocks for short rows (WarpRowPolicy; rows without packed sequences).
template <class P, bool kPacked = false, bool kWarpRows = false>
struct RowScan {
  using M = typename P::Monoid;
  using Value = typename P::Value;
  using Seg = Segmented<M>;
  using Lifted = typename Seg::value_type;
  // What passes from tile to tile and span to span: the running value, and with packed
  // sequences whether one started in what it covers.
  using CarryMonoid = std::conditional_t<kPacked, Seg, M>;
  using Carry = typename CarryMonoid::value_type;
  static_assert(!(kPacked && kWarpRows), "packed rows take the row loop's blocks or the flat kernel");
  using Policy = std::conditional_t<kWarpRows, WarpRowPolicy<Value>,
                                    RowPolicy<Value, P::kInputBytes, kCostlyCombine<M>, P::kNeedsMoreRegisters, kExpCombine<M>>>;
  static constexpr int kThreads = Policy::kThreads;
  static constexpr int kItems = Policy::kItems;
  static constexpr int kTile = Policy::kTile;
  static constexpr int kMinRowLength = Policy::kMinRowLength;
  using Scan = BlockScan<CarryMonoid, kThreads>;
  // The packed walk's tiles that hold no sequence start or end scan plain values (PlainTileScan).
  using PlainTileScan = BlockScan<M, kThreads>;
  // The packed instance holds more per thread (the sequence walk's state, a tile's bounds
  // loaded ahead): a quarter fewer blocks an SM, so that it does not spill.
  static constexpr int kMinBlocksPerSM = kPacked ? (Policy::kPackedMinBlocksPerSM * 3 + 3) / 4 : Policy::kMinBlocksPerSM;
  // The grid for `units` units of work, `resident` blocks running at once: a block a unit for
  // whole rows that take one (RowPolicy::kBlockPerRow), else at most the resident blocks.
  static unsigned grid(int64_t units, int64_t resident, bool whole_rows) {
    const bool block_per_unit = !kPacked && Policy::kBlockPerRow && whole_rows;
    return static_cast<unsigned>(units < resident || block_per_unit ? units : resident);
  }

  // Whether the kernel's counts fit: it counts rows, spans and tiles in 32 bits (far above any
  // tensor that fits), and a tile's sequences relative to its first in 32 bits.
  static bool counts_fit(const ScanGeometry& g) {
    return g.rows * ((g.len + kTile - 1) / kTile) < (int64_t{1} << 30) && g.num_segments() < (int64_t{1} << 31);
  }

  // The marking of a packed tile's sequence starts and ends (packed_tiles.cuh).
  using Tiles = PackedTiles<kThreads, kItems>;
  using TileSegments = typename Tiles::TileSegments;
  using RawBounds = typename Tiles::RawBounds;

  // run_packed's (run_dense's is its scan storage alone).
  struct SharedStorage {
    // Two of each, used alternately: a tile's are written while slower threads may still read
    // the previous tile's, and one barrier per tile then suffices.
    // (A tile inside one sequence uses the same storage for its plain scan: plain_storage.)
    typename Scan::Storage scan[2];
    TileSegments segments[2];
    int64_t unit_first;  // the sequence holding a unit's first position
  };

  // A thread's run of kItems positions between its loads and its use (held_run.cuh).
  using Held = HeldRun<P, kItems>;
  using HeldItems = typename Held::Run;

  // Loads the run that starts at logical position `pos` of the row (nothing past its end).
  template <class Cursor>
  static __device__ __forceinline__ void load(const P& problem, const ScanGeometry& g, const Cursor& cursor,
                                              int64_t pos, bool wide, HeldItems& held) {
    if (pos + kItems <= g.len) {
      const int64_t lo = g.reverse ? g.len - pos - kItems : pos;  // physical
      if (!(wide && Held::load_run(problem, cursor, lo, held))) {
#pragma unroll
        for (int k = 0; k < kItems; ++k) Held::load(problem, cursor, lo + k, k, held);
      }
      return;
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      if (pos + k < g.len) Held::load(problem, cursor, g.physical_pos(pos + k), k, held);
    }
  }

  // The values of the run loaded by `load` at `pos`, in scan order (identity past the row's
  // end). The first use of the loaded registers: a thread waits for its loads here.
  static __device__ __forceinline__ void values_of(const P& problem, const ScanGeometry& g, int64_t pos,
                                                   const HeldItems& held, Value (&values)[kItems]) {
    if (pos + kItems <= g.len) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) values[k] = Held::value(problem, held, k);
      if (g.reverse) reverse_items(values);
      return;
    }
#pragma unroll
    for (int k = 0; k < kItems; ++k) values[k] = pos + k < g.len ? Held::value(problem, held, k) : M::identity();
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

  // At a row's first tile (called by the whole block, there only): applies the row's initial
  // state to its first item and returns the exclusive output there (the identity in other
  // threads). The walks call it between the wait for a tile's loads and the issue of the next
  // tile's, and settle what it read, so that no later use waits for the next tile (settled()).
  static __device__ __forceinline__ Value enter_row(const P& problem, int64_t row, int64_t pos,
                                                    Value (&values)[kItems]) {
    if (pos == 0) values[0] = problem.at_head(values[0], row, 0);
    // (Read in every thread, the same value, so that it can be settled; thread 0 uses it.)
    return settled_uniform(problem.exclusive_head(row, 0));
  }

  // One tile: scans `values` in place into outputs, given the carry of the tiles before it and,
  // at the row's start, the exclusive output there (enter_row); returns the carry after it.
  static __device__ __forceinline__ Value scan_tile(typename Scan::Storage& storage, const P& problem,
                                                    const ScanGeometry& g, int64_t row, int64_t pos,
                                                    Value carry, const Value& head, Value (&values)[kItems]) {
    const bool row_start = pos == 0;
    Value thread_total = values[0];
#pragma unroll
    for (int k = 1; k < kItems; ++k) thread_total = M::combine(thread_total, values[k]);
    Value tile_total;
    Value running = M::combine(carry, Scan::exclusive(storage, thread_total, tile_total));
    const Value first_exclusive = row_start ? head : running;
    // The item at the row's last position, if this run holds it: its inclusive value is the
    // final state (rounded as that output is). Only one run of a row holds it, so the others
    // take a walk without the per-item test (64-bit compares: about a fifth of the
    // instructions of a bfloat16 affine tile).
    const int64_t last = g.len - 1 - pos;
    const auto walk = [&](auto holds_last) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const Value exclusive = k == 0 ? first_exclusive : running;
        running = M::combine(running, values[k]);
        if constexpr (decltype(holds_last)::value) {
          if (k == static_cast<int>(last)) problem.store_final(row, 0, running);
        }
        values[k] = g.exclusive ? exclusive : running;
      }
    };
    if (kHasFinalStates<P> && last >= 0 && last < kItems) {
      walk(std::bool_constant<kHasFinalStates<P>>{});
    } else {
      walk(std::false_type{});
    }
    return M::combine(carry, tile_total);
  }

  // ---- packed sequences (kPacked) ----

  // Applies the initial states of the sequences that start in this thread's items of a marked
  // tile. Called before the next tile's loads are issued, so that the states' loads are not
  // waited for with them (see the top of this file).
  static __device__ __forceinline__ void apply_heads(const TileSegments& ts, int64_t first, const P& problem,
                                                     const ScanGeometry& g, int64_t row, Value (&values)[kItems]) {
    if constexpr (kHasHeads<P>) {
      const uint32_t heads = Tiles::item_bits(ts.heads, threadIdx.x * kItems);
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        if ((heads >> k) & 1u) values[k] = problem.at_head(values[k], row, Tiles::item_segment(ts, first, g, k));
      }
    }
  }

  // One tile of a row cut by packed sequences (marked in `ts`, initial states applied by
  // apply_heads): scans `values` in place into outputs, given the carry of the tiles before it;
  // returns the carry after it.
  // (The summary pass stores no final state: it starts where the full pass does not.)
  static __device__ __forceinline__ Carry scan_packed_tile(typename Scan::Storage& storage, const TileSegments& ts,
                                                           int64_t first, const P& problem, const ScanGeometry& g,
                                                           int64_t row, bool summary, Carry carry,
                                                           Value (&values)[kItems]) {
    const int at = threadIdx.x * kItems;
    const uint32_t heads = Tiles::item_bits(ts.heads, at);
    const uint32_t lasts = Tiles::item_bits(ts.lasts, at);
    Lifted thread_total{values[0], (heads & 1u) != 0};
#pragma unroll
    for (int k = 1; k < kItems; ++k) thread_total = Seg::combine(thread_total, Lifted{values[k], ((heads >> k) & 1u) != 0});
    Lifted tile_total;
    const Lifted prefix = Scan::exclusive(storage, thread_total, tile_total);
    Value running = Seg::combine(carry, prefix).value;
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      Value exclusive = running;
      if ((heads >> k) & 1u) {
        // (Read only when used: a load here waits for the next tile's loads.)
        if (g.exclusive) exclusive = problem.exclusive_head(row, Tiles::item_segment(ts, first, g, k));
        running = values[k];
      } else {
        running = M::combine(running, values[k]);
      }
      if (kHasFinalStates<P> && !summary && ((lasts >> k) & 1u)) {
        problem.store_final(row, Tiles::item_segment(ts, first, g, k), running);
      }
      values[k] = g.exclusive ? exclusive : running;
    }
    return Seg::combine(carry, tile_total);
  }

  // The block scan storage of a tile's lifted pairs, used for its plain values.
  static __device__ __forceinline__ typename PlainTileScan::Storage& plain_storage(typename Scan::Storage& lifted) {
    using Plain = typename PlainTileScan::Storage;
    static_assert(sizeof(Plain) <= sizeof(typename Scan::Storage) && alignof(Plain) <= alignof(typename Scan::Storage),
                  "plain values fit where their lifted pairs do");
    return *reinterpret_cast<Plain*>(&lifted);
  }

  // A tile of a packed row that holds no sequence start or end (ts.marked is 0): the dense
  // tile's scan of plain values, without the lifted pairs' head bits and wider block scan; the
  // carry's flag (whether a sequence started in what it covers) passes through unchanged.
  static __device__ __forceinline__ Carry scan_plain_tile(typename PlainTileScan::Storage& storage,
                                                          const ScanGeometry& g, Carry carry,
                                                          Value (&values)[kItems]) {
    Value thread_total = values[0];
#pragma unroll
    for (int k = 1; k < kItems; ++k) thread_total = M::combine(thread_total, values[k]);
    Value tile_total;
    Value running = M::combine(carry.value, PlainTileScan::exclusive(storage, thread_total, tile_total));
#pragma unroll
    for (int k = 0; k < kItems; ++k) {
      const Value exclusive = running;
      running = M::combine(running, values[k]);
      values[k] = g.exclusive ? exclusive : running;
    }
    return Seg::combine(carry, Lifted{tile_total, false});
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
  static __device__ __forceinline__ Carry entering_carry(const ScanGeometry& g, const SpanPlan& spans, int64_t unit,
                                                        bool summary) {
    if (summary || unit < g.rows) return CarryMonoid::identity();
    return settled_uniform(static_cast<const Words<Carry>*>(spans.totals)[unit - g.rows].value);
  }

  // Packed: the sequence holding the first position the unit walks, found by warp 0 and handed
  // to every thread (a barrier: called by the whole block). The summary pass needs a span's
  // carry only from its last sequence start on (a start cuts off everything before it), so it
  // finds the sequence holding the span's last position and walks from that sequence's start.
  static __device__ __forceinline__ int64_t enter_unit(SharedStorage& smem, const ScanGeometry& g, Unit& at,
                                                       bool summary) {
    const int64_t end = int64_t{at.end_tile} * kTile < g.len ? int64_t{at.end_tile} * kTile : g.len;
    const int64_t pos = summary ? end - 1 : int64_t{at.tile} * kTile;
    if (threadIdx.x < 32) {
      const int64_t found = warp_find_segment(g, pos);
      if (threadIdx.x == 0) smem.unit_first = found;
    }
    __syncthreads();
    const int64_t first = smem.unit_first;
    if (summary) {
      const int64_t start = clamped_start(g, first);
      if (start > int64_t{at.tile} * kTile) at.tile = static_cast<int32_t>(start / kTile);
    }
    return first;
  }

  // The block walks units blockIdx.x, blockIdx.x + gridDim.x, ... (a grid sized to what runs
  // at once, engine.cuh), each tile by tile; the next tile, of this unit or the next, is always
  // loaded before the current one is scanned. The summary pass (spans.cuh) stores each span's
  // total instead of its outputs, and skips each row's last span. (Rows without packed
  // sequences take run_dense below, the same walk without the marking.)
  static __device__ void run_packed(const P& problem, const ScanGeometry& g, bool wide, const SpanPlan& spans, bool summary) {
    __shared__ SharedStorage smem;
    const int32_t units = static_cast<int32_t>(g.rows * (summary ? spans.count - 1 : spans.count));
    const int32_t tiles_per_row = static_cast<int32_t>((g.len + kTile - 1) / kTile);
    const int64_t offset = static_cast<int64_t>(threadIdx.x) * kItems;
    int32_t unit = blockIdx.x;
    if (unit >= units) return;
    Unit at = locate(g, spans, unit, tiles_per_row);
    // The sequence holding the current tile's first position, and the bounds of the tile's
    // first round of sequences.
    Tiles::clear_marks(smem.segments[0]);
    Tiles::clear_marks(smem.segments[1]);
    if (threadIdx.x == 0) smem.segments[0].next_first = smem.segments[1].next_first = 0;
    int64_t first = enter_unit(smem, g, at, summary);  // its barrier orders the clearing
    RawBounds round0 = Tiles::load_bounds(g, first + threadIdx.x);
    auto cursor = problem.cursor(at.row);
    Value current[kItems];
    HeldItems next;
    load(problem, g, cursor, int64_t{at.tile} * kTile + offset, wide, next);
    values_of(problem, g, int64_t{at.tile} * kTile + offset, next, current);
    Carry carry = entering_carry(g, spans, unit, summary);
    for (int parity = 0;; parity ^= 1) {
      int32_t next_unit = unit;
      Unit next_at{at.row, at.tile + 1, at.end_tile};
      if (next_at.tile == at.end_tile) {
        next_unit += gridDim.x;
        next_at = locate(g, spans, next_unit, tiles_per_row);
      }
      const bool more = next_unit < units;
      const auto next_cursor = next_at.row == at.row ? cursor : problem.cursor(more ? next_at.row : at.row);
      const int64_t pos = int64_t{at.tile} * kTile + offset;
      TileSegments& ts = smem.segments[parity];
      // Marking reads offsets and apply_heads initial states: both before the next tile's
      // loads are issued, which their uses would otherwise wait for (the top of this file).
      Tiles::mark_segments(ts, g, first, int64_t{at.tile} * kTile, round0);
      // The other masks were last read in the previous tile, before the barrier just passed;
      // the block scan's barrier separates their clearing from the next tile's marking.
      Tiles::clear_marks(smem.segments[parity ^ 1]);
      const int64_t next_first = ts.next_first;
      apply_heads(ts, first, problem, g, at.row, current);
      round0 = Tiles::load_bounds(g, next_first + threadIdx.x);  // the next tile's, if in this unit
      if (more) load(problem, g, next_cursor, int64_t{next_at.tile} * kTile + offset, wide, next);
      if (ts.marked) {
        carry = scan_packed_tile(smem.scan[parity], ts, first, problem, g, at.row, summary, carry, current);
      } else {
        carry = scan_plain_tile(plain_storage(smem.scan[parity]), g, carry, current);
      }
      first = next_first;
      if (!summary) store(problem, g, cursor, pos, wide, current);
      if (next_unit != unit) {
        if (summary && threadIdx.x == 0) static_cast<Words<Carry>*>(spans.totals)[unit].value = carry;
        if (!more) break;
        carry = entering_carry(g, spans, next_unit, summary);
        unit = next_unit;
        const int32_t planned = next_at.tile;
        first = enter_unit(smem, g, next_at, summary);
        round0 = Tiles::load_bounds(g, first + threadIdx.x);
        if (next_at.tile != planned) load(problem, g, next_cursor, int64_t{next_at.tile} * kTile + offset, wide, next);
      }
      at = next_at;
      cursor = next_cursor;
      values_of(problem, g, int64_t{at.tile} * kTile + offset, next, current);
    }
  }

  // ---- rows without packed sequences ----

  // Where a block's walk stands: a unit and one of its tiles (past the block's last unit when
  // `unit` >= the count of units).
  struct Step {
    int32_t unit;
    Unit at;
  };
  static __device__ __forceinline__ Step step_after(const ScanGeometry& g, const SpanPlan& spans, int32_t units,
                                                    int32_t tiles_per_row, const Step& s) {
    if (s.at.tile + 1 < s.at.end_tile) return {s.unit, {s.at.row, s.at.tile + 1, s.at.end_tile}};
    const int32_t unit = s.unit + static_cast<int32_t>(gridDim.x);
    return {unit, unit < units ? locate(g, spans, unit, tiles_per_row) : s.at};
  }

  // The walk of rows without packed sequences: run_packed without the sequence marking, whose state
  // (the marks' storage, the sequence walk, a tile's bounds loaded ahead) cost the dense rows
  // registers, and spills at their caps (affine float32: 16 bytes at 96 registers; H200:
  // (8, 2048, 4096) forward 0.224 -> 0.217 ms with this walk). Loading two or three tiles ahead
  // instead of one was measured and lost in every dense case (benchmarks/NOTES.md).
  static __device__ void run_dense(const P& problem, const ScanGeometry& g, bool wide, const SpanPlan& spans,
                                   bool summary) {
    __shared__ typename Scan::Storage scan_storage[2];  // used alternately, as run_packed's
    const int32_t units = static_cast<int32_t>(g.rows * (summary ? spans.count - 1 : spans.count));
    const int32_t tiles_per_row = static_cast<int32_t>((g.len + kTile - 1) / kTile);
    const int64_t offset = static_cast<int64_t>(threadIdx.x) * kItems;
    if (static_cast<int32_t>(blockIdx.x) >= units) return;
    Step now{static_cast<int32_t>(blockIdx.x), locate(g, spans, blockIdx.x, tiles_per_row)};
    auto cursor = problem.cursor(now.at.row);  // of now's row (its stores)
    auto load_cursor = cursor;                 // of the row last loaded
    HeldItems held;
    load(problem, g, cursor, int64_t{now.at.tile} * kTile + offset, wide, held);
    Step next = step_after(g, spans, units, tiles_per_row, now);
    Value carry = entering_carry(g, spans, now.unit, summary);
    int parity = 0;
    // One tile: false after the block's last. (As a lambda called in a loop, this walk
    // compiled to fewer registers than the same statements in the loop's body: bfloat16 add
    // with 128-thread blocks, when capped at 64 registers, spilled 16 bytes instead of 124.)
    const auto walk_tile = [&] {
      const int64_t pos = int64_t{now.at.tile} * kTile + offset;
      Value current[kItems];
      values_of(problem, g, pos, held, current);
      const Value head = kHasHeads<P> && now.at.tile == 0 ? enter_row(problem, now.at.row, pos, current) : M::identity();
      if (next.unit < units) {
        if (next.at.row != now.at.row) load_cursor = problem.cursor(next.at.row);
        load(problem, g, load_cursor, int64_t{next.at.tile} * kTile + offset, wide, held);
      }
      carry = scan_tile(scan_storage[parity], problem, g, now.at.row, pos, carry, head, current);
      parity ^= 1;
      if (!summary) store(problem, g, cursor, pos, wide, current);
      const Step after = step_after(g, spans, units, tiles_per_row, next);
      if (next.unit != now.unit) {
        if (summary && threadIdx.x == 0) static_cast<Words<Carry>*>(spans.totals)[now.unit].value = carry;
        if (next.unit >= units) return false;
        carry = entering_carry(g, spans, next.unit, summary);
        // (next's loads used this cursor; computing it again here, after they were issued,
        // would wait for them: the row indexer's divisions are calls, which wait for every
        // outstanding load.)
        cursor = load_cursor;
      }
      now = next;
      next = after;
      return true;
    };
    while (walk_tile()) {
    }
  }
};

template <class P, bool kPacked, bool kWarpRows = false>
__global__ void __launch_bounds__(RowScan<P, kPacked, kWarpRows>::kThreads, RowScan<P, kPacked, kWarpRows>::kMinBlocksPerSM)
    row_scan_kernel(const P problem, const ScanGeometry g, bool wide, const SpanPlan spans, bool summary) {
  using K = RowScan<P, kPacked, kWarpRows>;
  if constexpr (kPacked) {
    K::run_packed(problem, g, wide, spans, summary);
  } else {
    K::run_dense(problem, g, wide, spans, summary);
  }
}

}  // namespace parprims::cuda
