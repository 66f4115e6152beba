// The column kernel, for a strided scanned dimension whose neighbouring rows are adjacent in
// memory: the T of a (B, T, D) tensor, or packed (tokens, D) along dim 0.
//
// A block owns kColumns = 32 adjacent rows (one per lane, so that a warp's load reads 32
// neighbouring elements) and walks a span of positions tile by tile. Its kStretches warps cut
// a tile into consecutive stretches of kSteps positions, and each thread walks its stretch
// sequentially in registers. One barrier per tile shares the stretch totals through shared
// memory; the carry into the next tile stays in every thread's registers, and the next tile's
// loads are in flight while the current one is combined. There is no look-back, no tile
// counter and no atomic: the order of every combine is fixed, so results are the same on
// every run.
//
// A stretch that holds no segment start past its first position and no row end (every
// stretch of a row without packed sequences, but the last) takes a plain path: one fold of
// the monoid, no per-position segment checks. Other stretches walk position by position.
//
// When the blocks over rows alone would leave most of the GPU idle (few rows: a packed batch
// of 2048 channels is 64 blocks), each row is cut into spans that run in parallel (spans.cuh:
// a summary pass, a carry kernel, the full pass). With packed sequences a span's summary walks
// only from its last sequence start.
#pragma once

#include "held_run.cuh"
#include "policy.cuh"
#include "spans.cuh"

namespace parprims::cuda {

// The blocks across the rows, and how each row is cut into spans (spans.cuh); computed on
// the host (engine.cuh).
struct ColumnPlan {
  int64_t groups = 0;  // ceil(rows / 32)
  SpanPlan spans;
};

// The segment holding a position, where it starts, and where the next non-empty one starts
// (the row's length past the last). Moves forward only.
struct ColumnWalker {
  int64_t segment = 0, start = 0, next_start = 0;

  __device__ __forceinline__ void seek(const ScanGeometry& g, int64_t pos) {
    SegmentWalker w;
    w.seek(g, pos);
    segment = w.segment;
    start = g.segment_start(segment);
    next_start = w.next_start;
  }
  // Moves to `pos`, at or after the current position.
  __device__ __forceinline__ void advance(const ScanGeometry& g, int64_t pos) {
    if (pos < next_start) return;
    const int64_t last = g.num_segments() - 1;
    while (segment < last && g.segment_start(segment + 1) <= pos) ++segment;
    start = g.segment_start(segment);
    next_start = g.segment_start(segment + 1);
  }
  __device__ __forceinline__ bool is_head(int64_t pos) const { return pos == start; }
  __device__ __forceinline__ bool is_last(int64_t pos) const { return pos + 1 == next_start; }
};

template <class P>
struct ColumnScan {
  using M = typename P::Monoid;
  using Value = typename P::Value;
  using Seg = Segmented<M>;
  using Lifted = typename Seg::value_type;
  using Policy = ColumnPolicy<Value>;
  static constexpr int kThreads = Policy::kThreads;
  static constexpr int kColumns = 32;
  static constexpr int kStretches = kThreads / kColumns;
  static constexpr int kSteps = Policy::kSteps;
  static constexpr int64_t kTileLength = int64_t{kStretches} * kSteps;
  static constexpr bool kPrefetch = Policy::kPrefetch;
  static constexpr bool kStaged = kSteps > 1;

  struct SharedStorage {
    // A tile's stretch totals; two, used by tile parity, so that one barrier per tile suffices
    // (a tile's totals are written while slower threads may still read the previous tile's).
    Words<Lifted> totals[2][kStretches][kColumns];
    // A stretch that is not plain walks its positions in a rolled loop (its code stays small),
    // which indexes the values: they go through shared memory, as registers cannot be indexed.
    Words<Value> staged[kStaged ? kSteps : 1][kStaged ? kThreads : 1];
  };

  // The staged value at position k of this thread's stretch (with one step, its register).
  static __device__ __forceinline__ Value& slot(SharedStorage& smem, Value (&values)[kSteps], int k) {
    if constexpr (kStaged) {
      return smem.staged[k][threadIdx.x].value;
    } else {
      return values[0];
    }
  }

  // This thread's place: its row, stretch, and the span of positions its block walks.
  struct Place {
    int column, stretch;
    int64_t row;
    bool active;         // row < rows (the last group may be partial)
    int64_t begin, end;  // the span's positions
  };

  // The positions of the stretch at `pos` inside the span.
  static __device__ __forceinline__ int count_in_span(const Place& at, int64_t pos) {
    return pos >= at.end ? 0 : at.end - pos < kSteps ? static_cast<int>(at.end - pos) : kSteps;
  }

  // A thread's stretch between its loads and its use: element loads, one a register
  // (held_run.cuh).
  using Held = HeldRun<P, kSteps, WidenedRun>;
  using HeldSteps = typename Held::Run;

  // Loads the stretch at logical position `pos` (nothing past the span's end or in inactive
  // threads).
  template <class Cursor>
  static __device__ __forceinline__ void load_stretch(const P& problem, const ScanGeometry& g, const Place& at,
                                                      const Cursor& cursor, int64_t pos, HeldSteps& held) {
    if (at.active && pos + kSteps <= at.end) {
      const int64_t first = g.physical_pos(pos);
      const int64_t step = g.reverse ? -1 : 1;
#pragma unroll
      for (int k = 0; k < kSteps; ++k) Held::load(problem, cursor, first + k * step, k, held);
      return;
    }
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      if (at.active && pos + k < at.end) Held::load(problem, cursor, g.physical_pos(pos + k), k, held);
    }
  }

  // The values of the stretch loaded at `pos`, in scan order (identity past the span's end
  // and in inactive threads). The first use of the loaded registers.
  static __device__ __forceinline__ void values_of(const P& problem, const Place& at, int64_t pos,
                                                   const HeldSteps& held, Value (&values)[kSteps]) {
    if (at.active && pos + kSteps <= at.end) {
#pragma unroll
      for (int k = 0; k < kSteps; ++k) values[k] = Held::value(problem, held, k);
      return;
    }
#pragma unroll
    for (int k = 0; k < kSteps; ++k) {
      values[k] = at.active && pos + k < at.end ? Held::value(problem, held, k) : M::identity();
    }
  }

  // The total of the stretch at `pos`; the value at a segment start takes the problem's
  // initial state, and `heads` gets a bit per segment start. `plain`: the stretch is whole and
  // no segment starts or ends inside it past its first position. `walker` moves through it.
  static __device__ __forceinline__ Lifted stretch_total(SharedStorage& smem, const P& problem, const ScanGeometry& g,
                                                         const Place& at, int64_t pos, ColumnWalker& walker,
                                                         Value (&values)[kSteps], unsigned& heads, bool& plain) {
    plain = pos + kSteps <= at.end && walker.next_start >= pos + kSteps;
    if (plain) {
      const bool head = walker.is_head(pos);
      if (head && at.active) values[0] = problem.at_head(values[0], at.row, g.physical_segment(walker.segment));
      heads = head ? 1u : 0u;
      Value total = values[0];
#pragma unroll
      for (int k = 1; k < kSteps; ++k) total = M::combine(total, values[k]);
      return {total, head};
    }
    heads = 0;
    Lifted total = Seg::identity();
    if constexpr (kStaged) {
#pragma unroll
      for (int k = 0; k < kSteps; ++k) smem.staged[k][threadIdx.x].value = values[k];
    }
    const int count = count_in_span(at, pos);
#pragma unroll 1
    for (int k = 0; k < count; ++k) {
      const int64_t p = pos + k;
      walker.advance(g, p);
      const bool head = walker.is_head(p);
      Value& v = slot(smem, values, k);
      if (head) {
        heads |= 1u << k;
        if (at.active) v = problem.at_head(v, at.row, g.physical_segment(walker.segment));
      }
      total = Seg::combine(total, Lifted{v, head});
    }
    return total;
  }

  // Writes a whole stretch's outputs, at first, first + step, ...: in one call for problems
  // whose store reads inputs (kStoreReadsInputs: their loads then go out together).
  template <class Cursor>
  static __device__ __forceinline__ void store_steps(const P& problem, const Cursor& cursor, int64_t first,
                                                     int64_t step, const Value (&outputs)[kSteps]) {
    if constexpr (P::kStoreReadsInputs) {
      problem.template store_steps<kSteps>(cursor, first, step, outputs);
    } else {
#pragma unroll
      for (int k = 0; k < kSteps; ++k) problem.store(cursor, first + k * step, outputs[k]);
    }
  }

  // Stores the outputs of the stretch at `pos` from its carry-in `running` (`walker`: as it
  // was at the stretch's start).
  template <class Cursor>
  static __device__ __forceinline__ void store_stretch(SharedStorage& smem, const P& problem, const ScanGeometry& g,
                                                       const Place& at, const Cursor& cursor, int64_t pos,
                                                       ColumnWalker walker, bool plain, unsigned heads, Lifted running,
                                                       Value (&values)[kSteps]) {
    if (plain) {
      const int64_t first = g.physical_pos(pos);
      const int64_t step = g.reverse ? -1 : 1;
      const int64_t segment = g.physical_segment(walker.segment);
      const bool head = heads != 0;
      // The outputs replace the values in place; r ends as the stretch's inclusive total.
      Value r = running.value;
      if (g.exclusive) {
        const Value first_output = head ? problem.exclusive_head(at.row, segment) : r;
        r = head ? values[0] : M::combine(r, values[0]);
#pragma unroll
        for (int k = 1; k < kSteps; ++k) {
          const Value v = values[k];
          values[k] = r;
          r = M::combine(r, v);
        }
        values[0] = first_output;
      } else {
        r = head ? values[0] : M::combine(r, values[0]);
        values[0] = r;
#pragma unroll
        for (int k = 1; k < kSteps; ++k) values[k] = r = M::combine(r, values[k]);
      }
      store_steps(problem, cursor, first, step, values);
      if (walker.is_last(pos + kSteps - 1)) problem.store_final(at.row, segment, r);
      return;
    }
    const int count = count_in_span(at, pos);
#pragma unroll 1
    for (int k = 0; k < count; ++k) {
      const int64_t p = pos + k;
      walker.advance(g, p);
      const bool head = (heads >> k) & 1u;
      const Value v = slot(smem, values, k);
      const int64_t physical = g.physical_pos(p);
      const int64_t segment = g.physical_segment(walker.segment);
      if (g.exclusive) problem.store(cursor, physical, head ? problem.exclusive_head(at.row, segment) : running.value);
      running = Seg::combine(running, Lifted{v, head});
      if (!g.exclusive) problem.store(cursor, physical, running.value);
      if (walker.is_last(p)) problem.store_final(at.row, segment, running.value);
    }
  }

  // Walks the positions [at.begin, at.end) of the thread's row tile by tile, from `carry` (the
  // total of everything before the span); stores the outputs unless `summary`. Returns the
  // carry after the span.
  static __device__ __forceinline__ Lifted walk_span(SharedStorage& smem, const P& problem, const ScanGeometry& g,
                                                     const Place& at, Lifted carry, bool summary) {
    const auto cursor = problem.cursor(at.active ? at.row : 0);
    const int64_t offset = int64_t{at.stretch} * kSteps;  // of this stretch in a tile
    int64_t pos = at.begin + offset;
    ColumnWalker walker;
    walker.seek(g, pos < g.len ? pos : g.len - 1);
    Value current[kSteps];
    // Cleared once: a partial stretch loads only its positions in the span. (Measured: bfloat16
    // (8, 4096, 2048) along T 0.171 -> 0.164 ms on an H100 with the clearing, same kernel else.)
    HeldSteps next{};
    load_stretch(problem, g, at, cursor, pos, next);
    values_of(problem, at, pos, next, current);
    for (int parity = 0;; parity ^= 1) {
      const int64_t next_pos = pos + kTileLength;
      const bool more = next_pos - offset < at.end;
      if (kPrefetch && more) load_stretch(problem, g, at, cursor, next_pos, next);

      const ColumnWalker stretch_start = walker;
      unsigned heads;
      bool plain;
      const Lifted total = stretch_total(smem, problem, g, at, pos, walker, current, heads, plain);

      // The stretches' totals in order: this stretch's carry-in, and the next tile's.
      smem.totals[parity][at.stretch][at.column].value = total;
      __syncthreads();
      Lifted prefix = carry;
#pragma unroll
      for (int j = 0; j < kStretches; ++j) {
        if (j == at.stretch) prefix = carry;
        carry = Seg::combine(carry, smem.totals[parity][j][at.column].value);
      }

      if (!summary && at.active) {
        store_stretch(smem, problem, g, at, cursor, pos, stretch_start, plain, heads, prefix, current);
      }
      if (!more) break;
      if (!kPrefetch) load_stretch(problem, g, at, cursor, next_pos, next);
      walker.advance(g, next_pos < g.len ? next_pos : g.len - 1);
      pos = next_pos;
      values_of(problem, at, pos, next, current);
    }
    return carry;
  }

  // Where the summary pass starts a span: at the span's last sequence start, if it holds one
  // (a start cuts off everything before it, so the span's total is the same), else at its
  // begin. Every thread of the block finds the same place.
  static __device__ __forceinline__ int64_t summary_begin(const ScanGeometry& g, int64_t begin, int64_t end) {
    if (g.num_segments() == 1) return begin;
    SegmentWalker last;
    last.seek(g, end - 1);
    const int64_t start = g.segment_start(last.segment);
    return start > begin ? start : begin;
  }

  // The block walks units (row group, span) blockIdx.x, blockIdx.x + gridDim.x, ...: in the
  // summary pass it stores each span's total, in the full pass every output.
  static __device__ void run(const P& problem, const ScanGeometry& g, const ColumnPlan& plan, bool summary) {
    __shared__ SharedStorage smem;
    Place at;
    at.column = static_cast<int>(threadIdx.x) % kColumns;
    at.stretch = static_cast<int>(threadIdx.x) / kColumns;
    // The summary pass skips each row's last span: nothing reads its total.
    const int64_t units = plan.groups * (summary ? plan.spans.count - 1 : plan.spans.count);
    auto* span_totals = static_cast<Words<Lifted>*>(plan.spans.totals);
    for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
      const int64_t group = unit % plan.groups;
      const int64_t span = unit / plan.groups;
      at.row = group * kColumns + at.column;
      at.active = at.row < g.rows;
      at.begin = plan.spans.begin(span);
      at.end = plan.spans.end(span, g.len);
      if (summary) at.begin = summary_begin(g, at.begin, at.end);
      __syncthreads();  // the previous unit's last tile may still be read from shared memory
      Lifted carry = Seg::identity();
      if (!summary && span > 0 && at.active) carry = span_totals[(span - 1) * g.rows + at.row].value;
      carry = walk_span(smem, problem, g, at, carry, summary);
      if (summary && at.stretch == 0 && at.active) span_totals[span * g.rows + at.row].value = carry;
    }
  }
};

template <class P>
__global__ void __launch_bounds__(ColumnScan<P>::kThreads, ColumnScan<P>::Policy::kMinBlocksPerSM)
    column_scan_kernel(const P problem, const ScanGeometry g, const ColumnPlan plan, bool summary) {
  ColumnScan<P>::run(problem, g, plan, summary);
}

}  // namespace parprims::cuda
