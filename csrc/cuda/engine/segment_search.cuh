// Finding packed sequences from positions: the segment holding a position, searched by a whole
// warp (shared by the segment reductions and the row loop over packed sequences). Offsets are
// read clamped into [0, len], so invalid (unsorted, out-of-range) offsets give wrong results
// but never an access out of bounds.
#pragma once

#include "../../core/scan_geometry.h"
#include "warp.cuh"

namespace parprims::cuda {

// A segment's start clamped into [0, len], and its bounds clamped so, never decreasing: what an
// invalid offset gives is wrong, but in bounds.
__device__ __forceinline__ int64_t clamped_start(const ScanGeometry& g, int64_t segment) {
  return max(int64_t(0), min(g.len, g.segment_start(segment)));
}
// The same from a segment's start and the next one's as read (g.segment_start of k and k + 1).
__device__ __forceinline__ void clamp_bounds(const ScanGeometry& g, int64_t start, int64_t next_start,
                                             int64_t& begin, int64_t& end) {
  begin = max(int64_t(0), min(g.len, start));
  end = max(begin, min(g.len, next_start));
}
__device__ __forceinline__ void clamped_bounds(const ScanGeometry& g, int64_t segment, int64_t& begin, int64_t& end) {
  clamp_bounds(g, g.segment_start(segment), g.segment_start(segment + 1), begin, end);
}

// The segment holding position `pos`: the last k with segment_start(k) <= pos, found by the
// whole warp (every lane gets it), each round probing 32 offsets evenly spread over what is left
// (four rounds for 65536 segments). Offsets are clamped into [0, len]; invalid (unsorted)
// offsets give some k in range.
__device__ __forceinline__ int64_t warp_find_segment(const ScanGeometry& g, int64_t pos) {
  const int lane = threadIdx.x & 31;
  int64_t lo = 0, hi = g.num_segments() - 1;
  while (lo < hi) {
    const int64_t step = (hi - lo + 32) / 32;  // lane 0 probes lo itself
    const int64_t k = lo + lane * step;
    const unsigned probed = __ballot_sync(kFullMask, k <= hi && clamped_start(g, k) <= pos);
    const int last = probed == 0 ? 0 : 31 - __clz(probed);
    const int64_t next_lo = lo + last * step;
    hi = min(hi, next_lo + step - 1);
    lo = next_lo;
  }
  return lo;
}

}  // namespace parprims::cuda
