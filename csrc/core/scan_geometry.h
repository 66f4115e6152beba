// How the engines see a scan problem: `rows` independent rows of length `len`, each optionally
// cut into segments by one shared `offsets` array, scanned forward or backward.
// Plain data (pointers, sizes, strides, flags), filled by host wrappers. Torch-free.
#pragma once

#include "macros.h"

namespace parprims {

constexpr int kMaxRowDims = 8;

// Maps a row index to the element offset of that row's first element, for one operand.
// The rows enumerate every dimension but the scanned one, last dimension fastest.
struct RowIndexer {
  int ndim = 0;
  int64_t sizes[kMaxRowDims] = {};
  int64_t strides[kMaxRowDims] = {};
  int64_t stride_len = 1;  // element stride along the scanned dimension

  // Row-major decomposition of `row`; the outermost dimension needs no division, so a
  // single collapsed dimension (dense rows) costs one multiply.
  PP_HD int64_t row_offset(int64_t row) const {
    int64_t offset = 0;
    for (int d = ndim - 1; d > 0; --d) {
      const int64_t size = sizes[d];
      // 32-bit division when it fits: a 64-bit one is several times dearer on a GPU.
      const int64_t quotient = ((row | size) >> 32) == 0
                                   ? static_cast<int64_t>(static_cast<uint32_t>(row) / static_cast<uint32_t>(size))
                                   : row / size;
      offset += (row - quotient * size) * strides[d];
      row = quotient;
    }
    return ndim > 0 ? offset + row * strides[0] : offset;
  }
};

// The packed-sequence boundaries along the scanned dimension: segment k covers
// [offsets[k], offsets[k+1]). `offsets == nullptr` means each row is one segment.
struct SegmentSpec {
  const void* offsets = nullptr;
  bool offsets_are_int64 = true;
  int64_t num_segments = 1;

  PP_HD int64_t raw(int64_t k) const {
    return offsets_are_int64 ? static_cast<const int64_t*>(offsets)[k]
                             : static_cast<int64_t>(static_cast<const int32_t*>(offsets)[k]);
  }
};

struct ScanGeometry {
  int64_t rows = 1;
  int64_t len = 0;
  bool exclusive = false;
  bool reverse = false;  // scan from the end: an index mapping, never another kernel
  // Same rounding on every run: a tile takes its carry-in only from its predecessor's prefix
  // (a serial chain) instead of whatever predecessors have published (torch's
  // use_deterministic_algorithms). Integers are exact either way.
  bool deterministic = false;
  SegmentSpec segments;

  PP_HD int64_t physical_pos(int64_t logical_pos) const {
    return reverse ? len - 1 - logical_pos : logical_pos;
  }
  PP_HD int64_t num_segments() const { return segments.offsets ? segments.num_segments : 1; }
  // Start of logical segment k, in logical positions. In reverse, logical segment k is
  // physical segment S-1-k read backwards, so it starts where that one ends.
  PP_HD int64_t segment_start(int64_t k) const {
    if (!segments.offsets) return k <= 0 ? 0 : len;
    const int64_t s = segments.num_segments;
    return reverse ? len - segments.raw(s - k) : segments.raw(k);
  }
  PP_HD int64_t physical_segment(int64_t logical_segment) const {
    return reverse ? num_segments() - 1 - logical_segment : logical_segment;
  }
};

// Walks the logical positions of one row in order and says where segments start.
// `seek` finds the segment holding a position by binary search over [lo, hi]; `step`
// advances one position. Empty segments are skipped: they hold no element.
struct SegmentWalker {
  int64_t segment = 0;     // logical segment of the current position
  int64_t next_start = 0;  // logical start of the following non-empty segment (or len)

  // Finds the last k in [lo, hi] with segment_start(k) <= pos.
  PP_HD void seek(const ScanGeometry& g, int64_t pos, int64_t lo, int64_t hi) {
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (g.segment_start(mid) <= pos) lo = mid; else hi = mid - 1;
    }
    segment = lo;
    next_start = g.segment_start(segment + 1);
  }
  PP_HD void seek(const ScanGeometry& g, int64_t pos) { seek(g, pos, 0, g.num_segments() - 1); }

  // Whether the position `seek` stopped at starts its segment.
  PP_HD bool starts_segment(const ScanGeometry& g, int64_t pos) const {
    return g.segment_start(segment) == pos;
  }
  // Moves on to `pos`, the position after the one last seen; true when it starts a segment.
  PP_HD bool enter(const ScanGeometry& g, int64_t pos) {
    if (pos != next_start) return false;
    const int64_t last = g.num_segments() - 1;
    while (segment < last && g.segment_start(segment + 1) <= pos) ++segment;
    next_start = g.segment_start(segment + 1);
    return true;
  }
  // Whether `pos`, the position last seen, ends its segment.
  PP_HD bool is_last(int64_t pos) const { return pos + 1 == next_start; }
};

}  // namespace parprims

namespace parprims {

// How the operands lie in memory, for an engine to pick its strategy.
struct ScanLayout {
  // Every operand is one dense block, scanned dimension fastest: the flat index is the address.
  bool dense_rows = false;
  // The scanned dimension is strided and consecutive rows are adjacent in memory (scanning
  // the T of a (B, T, D) tensor): threads take neighbouring rows, so loads are coalesced.
  bool rows_adjacent = false;
};

inline ScanLayout classify_layout(const RowIndexer* indexers, int count, int64_t len) {
  ScanLayout layout{true, true};
  for (int k = 0; k < count; ++k) {
    const RowIndexer& r = indexers[k];
    const bool one_block = r.ndim == 0 || (r.ndim == 1 && r.strides[0] == len);
    layout.dense_rows = layout.dense_rows && (r.stride_len == 1 || len <= 1) && one_block;
    // A broadcast operand (stride 0) does not spoil coalescing.
    const bool adjacent = r.ndim > 0 && (r.strides[r.ndim - 1] == 1 || r.strides[r.ndim - 1] == 0);
    layout.rows_adjacent = layout.rows_adjacent && adjacent && r.stride_len != 1;
  }
  return layout;
}

}  // namespace parprims
