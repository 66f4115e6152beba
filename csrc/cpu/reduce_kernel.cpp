// The CPU ops of the reduction family: segment_reduce and reduce on the CPU scan engine
// (host/reduce_dispatch.h), and the histogram. Schemas: csrc/registration.cpp.
#include <ATen/ops/zeros.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../core/histogram.h"
#include "../host/reduce_dispatch.h"
#include "../host/reduce_host.h"
#include "../host/reduce_registration.h"
#include "engine_cpu.h"

namespace parprims::cpu {
namespace {

void run_reduce(const host::PreparedReduce& c) { host::dispatch_reduce(c.call, Engine{}); }

// Elements per task of a histogram over one long range (each task fills its own bins).
constexpr int64_t kHistogramChunk = 1 << 16;

// Adds the values x[begin, end) (weighted by w, or counted when w is null) into `hist`.
template <class T, class Acc>
void histogram_range(const T* x, const Acc* w, int64_t begin, int64_t end, const HistogramBins<host::compute_t<T>>& b,
                     Acc* hist) {
  using C = host::compute_t<T>;
  const C inv_range = C(1) / (b.hi - b.lo);
  for (int64_t i = begin; i < end; ++i) {
    const int64_t bin = b.bin_of_fast(static_cast<C>(x[i]), inv_range);
    if (bin >= 0) hist[bin] += w != nullptr ? w[i] : Acc(1);
  }
}

// x of element type T; Acc: int64_t counts, or float/double weight sums (weights already in Acc).
template <class T, class Acc>
void histogram_typed(const host::PreparedHistogram& c) {
  using C = host::compute_t<T>;
  const HistogramBins<C> b{static_cast<C>(c.lo), static_cast<C>(c.hi), c.bins};
  const T* x = c.x.const_data_ptr<T>();
  const Acc* w = c.weights.defined() ? c.weights.const_data_ptr<Acc>() : nullptr;
  Acc* out = c.out.data_ptr<Acc>();
  const int64_t n = c.x.numel();
  if (!c.offsets.defined()) {
    // One histogram: chunks in parallel into their own bins, added up in chunk order.
    const int64_t chunks = (n + kHistogramChunk - 1) / kHistogramChunk;
    std::vector<Acc> partial(static_cast<size_t>(chunks * c.bins), Acc(0));
    at::parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        histogram_range(x, w, k * kHistogramChunk, std::min(n, (k + 1) * kHistogramChunk), b,
                        partial.data() + k * c.bins);
      }
    });
    for (int64_t k = 0; k < chunks; ++k) {
      for (int64_t j = 0; j < c.bins; ++j) out[j] += partial[k * c.bins + j];
    }
    return;
  }
  // One histogram per sequence, sequences in parallel (the CPU validated the offsets).
  const bool wide = c.offsets.scalar_type() == at::kLong;
  const void* offsets = c.offsets.const_data_ptr();
  auto offset = [&](int64_t k) {
    return wide ? static_cast<const int64_t*>(offsets)[k] : static_cast<int64_t>(static_cast<const int32_t*>(offsets)[k]);
  };
  const int64_t segments = c.offsets.numel() - 1;
  const int64_t mean_length = std::max<int64_t>(1, n / std::max<int64_t>(segments, 1));
  const int64_t grain = std::max<int64_t>(1, kHistogramChunk / mean_length);
  at::parallel_for(0, segments, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t s = lo; s < hi; ++s) histogram_range(x, w, offset(s), offset(s + 1), b, out + s * c.bins);
  });
}

// index[i] = sequence * bins + bin of x[i], or -1 (the CPU validated the offsets).
template <class T>
void bin_index_typed(const host::PreparedHistogram& c) {
  using C = host::compute_t<T>;
  const HistogramBins<C> b{static_cast<C>(c.lo), static_cast<C>(c.hi), c.bins};
  const T* x = c.x.const_data_ptr<T>();
  int64_t* index = c.index.data_ptr<int64_t>();
  const int64_t n = c.x.numel();
  const at::Tensor starts = c.offsets.defined() ? c.offsets.to(at::kLong) : at::zeros({2}, c.x.options().dtype(at::kLong));
  const int64_t* offsets = starts.const_data_ptr<int64_t>();
  const int64_t segments = c.offsets.defined() ? starts.numel() - 1 : 1;
  at::parallel_for(0, n, kHistogramChunk, [&](int64_t lo, int64_t hi) {
    // The sequence holding position lo: the last start <= lo.
    int64_t s = std::upper_bound(offsets, offsets + segments, lo) - offsets - 1;
    for (int64_t i = lo; i < hi; ++i) {
      while (s + 1 < segments && offsets[s + 1] <= i) ++s;
      const int64_t bin = b.bin_of(static_cast<C>(x[i]));
      index[i] = bin >= 0 ? s * c.bins + bin : -1;
    }
  });
}

template <class Acc>
void histogram_for(const host::PreparedHistogram& c) {
  host::visit_floating(c.x.scalar_type(), [&](auto tag) { histogram_typed<typename decltype(tag)::type, Acc>(c); });
}

void run_histogram(const host::PreparedHistogram& c) {
  if (c.index.defined()) {
    return host::visit_floating(c.x.scalar_type(), [&](auto tag) { bin_index_typed<typename decltype(tag)::type>(c); });
  }
  switch (c.out.scalar_type()) {
    case at::kLong: return histogram_for<int64_t>(c);
    case at::kFloat: return histogram_for<float>(c);
    case at::kDouble: return histogram_for<double>(c);
    default: TORCH_INTERNAL_ASSERT(false, "histogram: unexpected output dtype");
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) { host::ReduceOps<&run_reduce, &run_histogram>::register_kernels(m); }

}  // namespace parprims::cpu
