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
};

}  // namespace parprims
