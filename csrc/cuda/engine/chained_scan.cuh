// The chained kernel: one pass over few long rows (one huge row, a few rows of millions), where
// the row loop's blocks over rows would leave the GPU idle. Each row is cut into chunks of
// 64 KB of values, a block per chunk, chained by a decoupled look-back (lookback.cuh):
//
//   1. the block claims the next chunk (a counter: chunks start in order, so every chunk's
//      predecessors are running or done), issues all of its loads at once into registers, and
//      scans it locally in place, sub-tile by sub-tile (a row loop's tile each);
//   2. warp 0 publishes the chunk's total, gathers the totals and prefixes of its predecessors
//      32 at a time until one is a prefix (the row's first chunk always is), and publishes the
//      chunk's own prefix (status and value in one word: WordTileState);
//   3. every thread combines that prefix into its local results and stores them.
//
// The input is read once. The row loop over spans (spans.cuh) reads it twice (a summary pass,
// then the full one), which held few long rows to half of the copy bandwidth. Chunks are large
// so that the chain keeps up: a chunk's prefix is ready one look-back (a few L2 round trips)
// after its loads land, and at the copy bandwidth the whole GPU finishes about 30 chunks of
// 64 KB each microsecond, so the predecessor holding a prefix is usually within the first
// window of 32. (Spans chained the same way but started together and ran in lockstep, so that
// prefixes advanced one window a round trip: benchmarks/NOTES.md, "Few long rows".)
//
// The prefix is combined into each local result (prefix + (x1 + x2)) rather than carried
// through the chunk ((prefix + x1) + x2), and the look-back combines whatever predecessors have
// published: float results may differ in the last bits from run to run, so deterministic mode
// takes the spans instead. Cheap scans of typed inputs into values of 4 or 8 bytes only
// (kChainedRows): the build gains one kernel per scan problem.
#pragma once

#include <type_traits>

#include "lookback.cuh"
#include "row_scan.cuh"

namespace parprims::cuda {

template <class P>
constexpr bool kChainedRows = kWarpRows<P> && (sizeof(typename P::Value) == 4 || sizeof(typename P::Value) == 8);

template <class P>
struct ChainedScan {
  // The loads, stores and tile scan of the one-warp row blocks (8 items a thread, whatever the
  // input), in wider blocks.
  using Rows = RowScan<P, false, true>;
  using M = typename P::Monoid;
  using Value = typename M::value_type;
  static constexpr int kThreads = 256;
  static constexpr int kItems = Rows::kItems;
  static constexpr int kSubTile = kThreads * kItems;
  // 64 KB of values a chunk, all of its loads issued at once and held in registers (64 a
  // thread): two blocks an SM, 16 warps, up to 128 KB of loads in flight.
  static constexpr int kChunkBytes = 64 * 1024;
  static constexpr int kSubTiles = kChunkBytes / (kSubTile * static_cast<int>(sizeof(Value)));
  static constexpr int64_t kChunk = int64_t{kSubTile} * kSubTiles;
  static constexpr int kMinBlocksPerSM = 2;
  using Scan = BlockScan<M, kThreads>;
  using HeldItems = typename Rows::HeldItems;
  static_assert(kSubTiles >= 1, "a chunk holds whole sub-tiles");

  struct SharedStorage {
    typename Scan::Storage scan[2];  // used alternately, as the row loop's
    Words<Value> prefix;             // the chunk's exclusive prefix (step 2)
    Words<Value> last_inclusive;     // the local inclusive value at the row's last position
    unsigned long long chunk;
  };

  // Step 1: scans the chunk at logical position `begin` of `row` from the identity, in place,
  // its first `sub_tiles` sub-tiles (those inside the row); returns the chunk's total.
  template <class Cursor>
  static __device__ __forceinline__ Value scan_locally(SharedStorage& smem, const P& problem, const ScanGeometry& g,
                                                       const Cursor& cursor, int64_t row, int64_t begin,
                                                       int sub_tiles, bool wide, Value (&values)[kSubTiles][kItems]) {
    const int64_t offset = static_cast<int64_t>(threadIdx.x) * kItems;
    HeldItems held[kSubTiles];
#pragma unroll
    for (int j = 0; j < kSubTiles; ++j) {
      if (j < sub_tiles) Rows::load(problem, g, cursor, begin + int64_t{j} * kSubTile + offset, wide, held[j]);
    }
    Value carry = M::identity();
#pragma unroll
    for (int j = 0; j < kSubTiles; ++j) {
      if (j >= sub_tiles) break;
      const int64_t pos = begin + int64_t{j} * kSubTile + offset;
      Rows::values_of(problem, g, pos, held[j], values[j]);
      const Value head = kHasHeads<P> && begin == 0 && j == 0 ? Rows::enter_row(problem, row, pos, values[j])
                                                              : M::identity();
      carry = Rows::template scan_block_run<Scan>(smem.scan[j & 1], g, pos, carry, head, values[j],
                                                  [&](const Value& v) { smem.last_inclusive.value = v; });
    }
    return carry;
  }

  // Step 2 (warp 0): publishes the chunk's total and then its inclusive prefix; returns its
  // exclusive prefix (the identity for a row's first chunk).
  static __device__ __forceinline__ Value chain(const WordTileState<Value>& state, int64_t chunk, int64_t row_first,
                                                const Value& total) {
    const bool starts_row = chunk == row_first;
    if (threadIdx.x == 0) state.publish(chunk, total, starts_row ? kPrefix : kAggregate);
    if (starts_row) return M::identity();
    const Value prefix = look_back_warp<M>(state, chunk, row_first, 1, [](const Value&) { return false; });
    if (threadIdx.x == 0) state.publish(chunk, M::combine(prefix, total), kPrefix);
    return prefix;
  }

  static __device__ void run(const P& problem, const ScanGeometry& g, const WordTileState<Value>& state,
                             int64_t chunks_per_row, bool wide) {
    __shared__ SharedStorage smem;
    if (threadIdx.x == 0) smem.chunk = state.claim_tile();
    __syncthreads();
    const int64_t chunk = static_cast<int64_t>(smem.chunk);
    const int64_t row = chunk / chunks_per_row;
    const int64_t row_first = row * chunks_per_row;
    const int64_t begin = (chunk - row_first) * kChunk;
    const int64_t left = g.len - begin;
    const int sub_tiles = left >= kChunk ? kSubTiles : static_cast<int>((left + kSubTile - 1) / kSubTile);
    const auto cursor = problem.cursor(row);

    Value values[kSubTiles][kItems];
    const Value total = scan_locally(smem, problem, g, cursor, row, begin, sub_tiles, wide, values);
    if (threadIdx.x < 32) {
      const Value prefix = chain(state, chunk, row_first, total);
      if (threadIdx.x == 0) smem.prefix.value = prefix;
    }
    __syncthreads();

    // Step 3.
    const bool has_prefix = chunk != row_first;
    const Value prefix = smem.prefix.value;
    const int64_t offset = static_cast<int64_t>(threadIdx.x) * kItems;
#pragma unroll
    for (int j = 0; j < kSubTiles; ++j) {
      if (j >= sub_tiles) break;
      if (has_prefix) {
#pragma unroll
        for (int k = 0; k < kItems; ++k) values[j][k] = M::combine(prefix, values[j][k]);
      }
      Rows::store(problem, g, cursor, begin + int64_t{j} * kSubTile + offset, wide, values[j]);
    }
    if (kHasFinalStates<P> && threadIdx.x == 0 && left <= kChunk) {
      const Value last = smem.last_inclusive.value;
      problem.store_final(row, 0, has_prefix ? M::combine(prefix, last) : last);
    }
  }
};

template <class P>
__global__ void __launch_bounds__(ChainedScan<P>::kThreads, ChainedScan<P>::kMinBlocksPerSM)
    chained_scan_kernel(const P problem, const ScanGeometry g, const WordTileState<typename P::Monoid::value_type> state,
                        int64_t chunks_per_row, bool wide) {
  ChainedScan<P>::run(problem, g, state, chunks_per_row, wide);
}

}  // namespace parprims::cuda
