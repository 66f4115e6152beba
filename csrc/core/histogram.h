// Equal-width histogram bins, shared by the CPU and CUDA histogram kernels. Torch-free.
#pragma once

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
  // 8 ulps relative: 2^-20 in float, 2^-49 in double.
  static constexpr C kEdgeMargin = sizeof(C) == 4 ? C(9.5367431640625e-07) : C(1.7763568394002505e-15);
};

}  // namespace parprims
