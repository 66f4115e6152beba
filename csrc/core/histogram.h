// Equal-width histogram bins, shared by the CPU and CUDA histogram kernels. Torch-free.
#pragma once

#include <cmath>
#include <cstdint>

#include "macros.h"

namespace parprims {

// `bins` equal-width bins over [lo, hi] in the compute type C (float for float32 and half
// inputs, double for float64), as torch.histc computes them.
template <class C>
struct HistogramBins {
  C lo;
  C hi;
  int64_t bins;

  // The bin of `v`, or -1 when it is outside [lo, hi] or NaN. The last bin is closed: hi (and a
  // value that rounds up to `bins` just below it) lands in bin bins - 1.
  PP_HD int64_t bin_of(C v) const {
    if (!(v >= lo && v <= hi)) return -1;  // NaN fails both comparisons
    const int64_t b = static_cast<int64_t>((v - lo) * static_cast<C>(bins) / (hi - lo));
    return b < bins ? b : bins - 1;
  }

  // bin_of without a division per value: the same numerator times `inv_range` (1 / (hi - lo) in
  // C). The product differs from the quotient by less than 2 ulps, so when it lies further than
  // 8 ulps from an integer both truncate alike; closer than that, bin_of decides. The bin is
  // always bin_of's.
  PP_HD int64_t bin_of_fast(C v, C inv_range) const {
    if (!(v >= lo && v <= hi)) return -1;
    const C q = (v - lo) * static_cast<C>(bins) * inv_range;
    const int64_t b = static_cast<int64_t>(q);
    const C frac = q - static_cast<C>(b);
    const C margin = q * kEdgeMargin;
    if (frac < margin || frac > C(1) - margin) return bin_of(v);
    return b < bins ? b : bins - 1;
  }
  // The CUDA kernel's lean form of bin_of_fast for double values (float, half and bfloat16 values
  // take cuda/histogram.cu's LeanBinsF32), for fewer than 2^24 bins: `scale` = bins * (1 /
  // (hi - lo)) (one product per value; three roundings in all, so the product is within 4 ulps
  // of bin_of's quotient), 32-bit integers, and an absolute edge margin of 8 ulps of `bins`
  // (at least 8 ulps of the product, since it is at most bins). Values outside [lo, hi] and NaN
  // give `outside`. The bin is always bin_of's.
  PP_HD int bin_of_lean(C v, C scale, int outside) const {
    // Computed for every value and selected at the end (no branch but the rare edge case);
    // NaN and infinities convert to some integer that the selection drops.
    const C q = (v - lo) * scale;
    const int b = static_cast<int>(q);
    const C frac = q - static_cast<C>(b);
    const C half_gap = C(0.5) - static_cast<C>(bins) * kEdgeMargin;
    const bool inside = v >= lo && v <= hi;  // NaN fails both comparisons
    const int last = static_cast<int>(bins) - 1;
    int bin = b < last ? b : last;
    if (inside && !(::fabs(frac - C(0.5)) < half_gap)) bin = static_cast<int>(bin_of(v));  // near an edge (rare)
    return inside ? bin : outside;
  }
  // 8 ulps relative: 2^-20 in float, 2^-49 in double.
  static constexpr C kEdgeMargin = sizeof(C) == 4 ? C(9.5367431640625e-07) : C(1.7763568394002505e-15);
};

}  // namespace parprims
