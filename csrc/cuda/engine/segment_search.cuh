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

// The segments holding positions `pos[0]` and `pos[1]`: for each, the last k with
// segment_start(k) <= pos, found by the whole warp, each round probing 32 offsets evenly spread
// over what is left (four rounds for 65536 segments); the two searches share their rounds, so
// their loads are in flight together. Offsets are clamped into [0, len]; invalid (unsorted)
// offsets give some k in range.
__device__ __forceinline__ void warp_find_segments(const ScanGeometry& g, const int64_t (&pos)[2],
                                                   int64_t (&found)[2]) {
  const int lane = threadIdx.x & 31;
  int64_t lo[2] = {0, 0}, hi[2] = {g.num_segments() - 1, g.num_segments() - 1};
  while (lo[0] < hi[0] || lo[1] < hi[1]) {
    int64_t step[2];
    bool before[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      step[i] = (hi[i] - lo[i] + 32) / 32;  // lane 0 probes lo itself
      const int64_t k = lo[i] + lane * step[i];
      before[i] = lo[i] < hi[i] && k <= hi[i] && clamped_start(g, k) <= pos[i];
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const unsigned probed = __ballot_sync(kFullMask, before[i]);
      if (lo[i] < hi[i]) {
        const int last = probed == 0 ? 0 : 31 - __clz(probed);
        const int64_t next_lo = lo[i] + last * step[i];
        hi[i] = min(hi[i], next_lo + step[i] - 1);
        lo[i] = next_lo;
      }
    }
  }
  found[0] = lo[0];
  found[1] = lo[1];
}

}  // namespace parprims::cuda
