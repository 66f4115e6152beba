// The marking of a packed row's tiles (the row loop's packed walk, row_scan.cuh): before a tile
// is scanned, the block marks its sequence starts and ends in shared bit masks. Thread i reads
// the bounds of the tile's i-th sequence (one coalesced round of offsets for up to kThreads
// sequences a tile), counted from the sequence that holds the tile's first position, which the
// previous tile's marking found; each thread then takes its items' bits with one shared load.
// No thread searches the offsets and no position is tested against them one by one.
#pragma once

#include <cstdint>

#include "../../core/scan_geometry.h"
#include "segment_search.cuh"

namespace parprims::cuda {

// A block of kThreads threads of kItems positions each (a tile of kThreads * kItems positions).
template <int kThreads, int kItems>
struct PackedTiles {
  static constexpr int kTile = kThreads * kItems;
  static_assert(32 % kItems == 0 && kTile % 32 == 0, "a thread's items take bits of one mask word");

  // The packed sequences of one tile: bit masks of the positions that start and end
  // a sequence (sequences without positions are skipped, as everywhere in the engine), the
  // sequence at each marked position (counted from `first`, the one holding the tile's first
  // position), the sequence holding the next tile's first position, and whether any position
  // is marked (a tile inside one sequence is scanned as a dense tile's).
  struct TileSegments {
    uint32_t heads[kTile / 32];
    uint32_t lasts[kTile / 32];
    uint32_t segment[kTile];
    int64_t next_first;
    unsigned marked;  // (set by atomics: several threads may mark the same tile)
  };

  // The bounds of sequence `k` as read from the offsets, not yet clamped (clamp_bounds). A
  // tile's first round of bounds is loaded a tile ahead, so that the loads' latency hides
  // behind the current tile's scan.
  struct RawBounds {
    int64_t lo = 0, hi = 0;
  };
  static __device__ __forceinline__ RawBounds load_bounds(const ScanGeometry& g, int64_t k) {
    if (k >= g.num_segments()) return {};
    return {g.segment_start(k), g.segment_start(k + 1)};
  }

  // Zeroes the bit masks of `ts` (before its tile is marked; a barrier must separate this from
  // the marking).
  static __device__ __forceinline__ void clear_marks(TileSegments& ts) {
    for (int i = threadIdx.x; i < kTile / 32; i += kThreads) {
      ts.heads[i] = 0;
      ts.lasts[i] = 0;
    }
    if (threadIdx.x == 0) ts.marked = 0;
  }

  // Marks the starts and ends of the sequences in the tile at logical position `begin`, from
  // `first`, the sequence holding `begin`: thread i takes sequence first + i (its bounds in
  // `round0`, loaded ahead), then first + kThreads + i, ... while sequences still start inside
  // the tile, and records the one holding the next tile's first position. The masks must be
  // clear. Ends with a barrier.
  static __device__ __forceinline__ void mark_segments(TileSegments& ts, const ScanGeometry& g, int64_t first,
                                                       int64_t begin, const RawBounds& round0) {
    const int64_t end = begin + kTile < g.len ? begin + kTile : g.len;
    const int64_t last_segment = g.num_segments() - 1;
    for (int64_t k = first + threadIdx.x;; k += kThreads) {
      bool more = false;
      if (k <= last_segment) {
        int64_t lo, hi;
        const RawBounds raw = k - first < kThreads ? round0 : load_bounds(g, k);
        clamp_bounds(g, raw.lo, raw.hi, lo, hi);
        const uint32_t relative = static_cast<uint32_t>(k - first);
        if (lo < hi && lo >= begin && lo < end) {  // (sequences without positions are not marked)
          atomicOr(&ts.heads[(lo - begin) / 32], 1u << ((lo - begin) % 32));
          ts.segment[lo - begin] = relative;
          atomicOr(&ts.marked, 1u);
        }
        if (lo < hi && hi > begin && hi <= end) {
          atomicOr(&ts.lasts[(hi - 1 - begin) / 32], 1u << ((hi - 1 - begin) % 32));
          ts.segment[hi - 1 - begin] = relative;  // the same sequence as a start there, if any
          atomicOr(&ts.marked, 1u);
        }
        if (lo <= end && end < hi) ts.next_first = k;
        // The next sequence starts at hi: another round if it starts inside or at the tile's end.
        more = threadIdx.x == kThreads - 1 && k < last_segment && hi <= end;
      }
      if (!__syncthreads_or(more)) break;
    }
  }

  // The bits of this thread's items in a tile's mask.
  static __device__ __forceinline__ uint32_t item_bits(const uint32_t* mask, int at) {
    constexpr uint32_t kBits = kItems == 32 ? ~0u : (1u << kItems) - 1;
    return (mask[at / 32] >> (at % 32)) & kBits;
  }

  // The physical sequence of this thread's item k in a marked tile (items at a start or an end
  // only); clamped, so that invalid offsets stay in bounds.
  static __device__ __forceinline__ int64_t item_segment(const TileSegments& ts, int64_t first, const ScanGeometry& g,
                                                         int k) {
    const int64_t last_segment = g.num_segments() - 1;
    const int64_t logical = first + ts.segment[threadIdx.x * kItems + k];
    return g.physical_segment(logical < last_segment ? logical : last_segment);
  }
};

}  // namespace parprims::cuda
