// The CUDA histogram: privatized bins per block in shared memory, added to the output once per
// block (and whenever the block's run of tiles moves on to another sequence).
//
// A block takes a contiguous run of tiles (kThreads x kItems values each). A tile inside one
// sequence adds into the block's shared bins. Without sequences and weights, when x is 16-byte
// aligned (the common call), the block's full tiles take a lean path: 16-byte loads, 32-bit
// offsets and bins, and the next tile's loads in flight while the current one is binned.
// Each thread keeps its last bin and the count (or weight sum) gathered for it in registers
// and adds them to shared memory only when the bin changes: skewed data (most values in one
// bin) then costs a shared atomic for a small fraction of its values, and uniform data costs one
// plain shared atomic per value and nothing more (a warp-wide match of equal bins per value, tried first, cost more than the atomics it saved:
// 2.27 ms for 2^28 uniform values on an H200, 0.11 of the copy bandwidth). A tile that straddles
// sequences (many short ones) adds each value straight into the output with a global atomic.
// Counts are 32-bit in shared memory (a block adds fewer than 2^32 values between flushes) and
// 64-bit in the output, so they are exact at any count. Nothing is read back to the host.
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>

#include "../core/histogram.h"
#include "../core/scan_geometry.h"
#include "../host/reduce_call.h"
#include "../host/scan_dispatch.h"
#include "reduce_instantiations.h"

namespace parprims::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kItems = 16;       // values per thread and tile
constexpr int kScalarItems = 8;  // values per thread and round of the general path
constexpr int64_t kTile = kThreads * kItems;
constexpr int kBlocksPerSM = 4;
// Shared bins per block, in bytes: more bins than this add straight into the output.
constexpr int64_t kSharedBinBytes = 32 * 1024;
// A block's run of values between flushes stays below 2^31, so 32-bit shared counts never wrap.
constexpr int64_t kMaxRunValues = int64_t(1) << 31;

// Shared-memory bins: 32-bit counts, or sums in the output's type.
template <class Acc>
struct SharedBin {
  using type = Acc;
};
template <>
struct SharedBin<int64_t> {
  using type = unsigned int;
};

template <class Acc>
__device__ __forceinline__ void global_add(Acc* p, Acc v) {
  if constexpr (std::is_same_v<Acc, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else {
    atomicAdd(p, v);
  }
}

// The sequence holding position `pos`, searched among [lo, hi]: always in [0, S-1], whatever
// the offsets hold (unvalidated offsets give wrong sequences, never out-of-bounds writes).
__device__ __forceinline__ int64_t sequence_of(const ScanGeometry& g, int64_t pos, int64_t lo, int64_t hi) {
  if (g.segments.offsets == nullptr) return 0;
  SegmentWalker w;
  w.seek(g, pos, lo, hi);
  return w.segment;
}

// A thread's last bin and what it gathered for it, added to the shared bins when the bin changes.
template <class Shared, class Acc>
struct BinCache {
  int bin = -1;
  Shared amount = Shared(0);

  __device__ __forceinline__ void add(Shared* hist, int b, Acc weight) {
    if (b < 0) return;  // outside the range, or NaN
    if (b != bin) {
      spill(hist);
      bin = b;
    }
    amount += static_cast<Shared>(weight);
  }
  __device__ __forceinline__ void spill(Shared* hist) {
    if (bin >= 0 && amount != Shared(0)) atomicAdd(hist + bin, amount);
    bin = -1;
    amount = Shared(0);
  }
};

// The wide path's count cache: out-of-range values go to a spare slot past the bins (never
// flushed), so that a value costs no test beyond the bin comparison.
struct CountCache {
  unsigned hist;  // the bins' shared-memory address (the window's base computed once)
  int bin;
  unsigned amount = 0;
  __device__ CountCache(unsigned* bins, int spare)
      : hist(static_cast<unsigned>(__cvta_generic_to_shared(bins))), bin(spare) {}
  __device__ __forceinline__ void add(int b) {
    if (b != bin) {
      spill();
      bin = b;
      amount = 0;
    }
    ++amount;
  }
  __device__ __forceinline__ void spill() const {
    asm volatile("red.shared.add.u32 [%0], %1;" ::"r"(hist + 4u * static_cast<unsigned>(bin)), "r"(amount) : "memory");
  }
};

template <class T, class Acc>
struct HistogramParams {
  const T* x;
  const Acc* weights;  // null: counts
  Acc* out;            // (S, bins)
  int64_t n;
  int64_t tiles_per_block;
  bool shared_bins;
  bool wide;  // x is 16-byte aligned, no weights, no sequences: full tiles take bin_wide_tiles
  HistogramBins<host::compute_t<T>> bins;
  host::compute_t<T> inv_range;  // 1 / (hi - lo), for bin_of_fast
  host::compute_t<T> scale;      // bins * inv_range, for bin_of_lean
  ScanGeometry g;  // len = n; segments = the offsets (none: one histogram)
};

// Value j of a 16-byte vector of T, taken from its words (a cast of the vector's address would
// put it in local memory).
template <class T>
__device__ __forceinline__ T vector_element(const int4& w, int j) {
  if constexpr (sizeof(T) == 8) {
    const int lo = j == 0 ? w.x : w.z, hi = j == 0 ? w.y : w.w;
    return __longlong_as_double((static_cast<long long>(hi) << 32) | static_cast<unsigned>(lo));
  } else {
    const int word_index = j * static_cast<int>(sizeof(T)) / 4;
    const int word = word_index == 0 ? w.x : word_index == 1 ? w.y : word_index == 2 ? w.z : w.w;
    if constexpr (sizeof(T) == 4) {
      return __int_as_float(word);
    } else {
      const auto bits = static_cast<unsigned short>(j % 2 == 0 ? word & 0xffff : static_cast<unsigned>(word) >> 16);
      return T(bits, T::from_bits());
    }
  }
}

// The lean path over full tiles [tile, end_tile): each thread's values of a tile are kItems / V
// vectors of V = 16 / sizeof(T) values, a warp's vectors consecutive; offsets within a tile are
// 32-bit, and the next tile's vectors are loaded while the current tile is binned.
template <class T, class Acc>
__device__ __forceinline__ void bin_wide_tiles(const HistogramParams<T, Acc>& p, unsigned* hist, int64_t tile,
                                               int64_t end_tile) {
  using C = host::compute_t<T>;
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  constexpr int kVectors = kItems / V;
  static_assert(kItems % V == 0, "whole vectors per thread");
  const int spare = static_cast<int>(p.bins.bins);  // the slot past the bins
  CountCache cache(hist, spare);
  int4 current[kVectors], next[kVectors];  // 16 bytes: V values each
  auto load = [&](int64_t t, int4 (&dst)[kVectors]) {
    const int4* base = reinterpret_cast<const int4*>(p.x + t * kTile);  // aligned: checked on the host
#pragma unroll
    for (int k = 0; k < kVectors; ++k) dst[k] = base[k * kThreads + static_cast<int>(threadIdx.x)];
  };
  // Double values leave no registers for a second tile under the cap of kBlocksPerSM blocks.
  constexpr bool kPrefetch = sizeof(T) < 8;
  if (kPrefetch) load(tile, current);
  for (; tile < end_tile; ++tile) {
    if (kPrefetch) {
      load(min(tile + 1, end_tile - 1), next);  // unconditional (the last tile again, from L2): no local memory
    } else {
      load(tile, current);
    }
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const C v = static_cast<C>(vector_element<T>(current[k], j));
        cache.add(p.bins.bin_of_lean(v, p.scale, spare));
      }
    }
    if (kPrefetch) {
#pragma unroll
      for (int k = 0; k < kVectors; ++k) current[k] = next[k];
    }
  }
  cache.spill();
}

template <class T, class Acc>
__global__ void __launch_bounds__(kThreads, kBlocksPerSM) histogram_kernel(const HistogramParams<T, Acc> p) {
  using C = host::compute_t<T>;
  using Shared = typename SharedBin<Acc>::type;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Shared* hist = reinterpret_cast<Shared*>(smem_raw);
  __shared__ int64_t tile_sequences[2];
  const int64_t nbins = p.bins.bins;
  BinCache<Shared, Acc> cache;

  if (p.shared_bins) {
    for (int64_t j = threadIdx.x; j < nbins; j += kThreads) hist[j] = Shared(0);
  }
  int64_t current = -1;  // the sequence the shared bins hold (block-uniform)
  auto flush = [&]() {
    __syncthreads();
    for (int64_t j = threadIdx.x; j < nbins; j += kThreads) {
      const Shared v = hist[j];
      if (v != Shared(0)) global_add(p.out + current * nbins + j, static_cast<Acc>(v));
      hist[j] = Shared(0);
    }
    __syncthreads();
  };

  const int64_t first_tile = static_cast<int64_t>(blockIdx.x) * p.tiles_per_block;
  const int64_t total_tiles = (p.n + kTile - 1) / kTile;
  const int64_t last_tile = min(first_tile + p.tiles_per_block, total_tiles);
  const int64_t segments = p.g.num_segments();
  if (p.wide) {  // one histogram, so the bins hold sequence 0 throughout
    const int64_t full_end = min(last_tile, p.n / kTile);
    if (first_tile < full_end) {
      current = 0;
      if constexpr (std::is_same_v<Shared, unsigned>) bin_wide_tiles(p, hist, first_tile, full_end);
    }
  }
  for (int64_t tile = p.wide ? max(first_tile, min(last_tile, p.n / kTile)) : first_tile; tile < last_tile; ++tile) {
    const int64_t begin = tile * kTile;
    const int64_t end = min(begin + kTile, p.n);
    int64_t seq_lo = 0, seq_hi = 0;
    if (p.g.segments.offsets != nullptr) {  // block-uniform
      if (threadIdx.x < 2) {
        tile_sequences[threadIdx.x] = sequence_of(p.g, threadIdx.x == 0 ? begin : end - 1, 0, segments - 1);
      }
      __syncthreads();
      seq_lo = tile_sequences[0];
      seq_hi = tile_sequences[1];
      __syncthreads();  // tile_sequences is rewritten by the next tile
    }

    const bool one_sequence = seq_lo == seq_hi || seq_hi < seq_lo;
    if (p.shared_bins && one_sequence && seq_lo != current) {
      if (current >= 0) {
        cache.spill(hist);
        flush();
      }
      current = seq_lo;
    }
    for (int64_t round = begin; round < end; round += kThreads * kScalarItems) {
      // Load first, then bin: kScalarItems independent loads in flight per thread.
      C values[kScalarItems];
      Acc weights[kScalarItems];
#pragma unroll
      for (int k = 0; k < kScalarItems; ++k) {
        const int64_t i = round + k * kThreads + threadIdx.x;
        values[k] = i < end ? static_cast<C>(p.x[i]) : C(0);
        weights[k] = i < end && p.weights != nullptr ? p.weights[i] : Acc(1);
      }
      if (p.shared_bins && one_sequence) {
#pragma unroll
        for (int k = 0; k < kScalarItems; ++k) {
          const int64_t i = round + k * kThreads + threadIdx.x;
          if (i < end) cache.add(hist, static_cast<int>(p.bins.bin_of_fast(values[k], p.inv_range)), weights[k]);
        }
      } else {
#pragma unroll
        for (int k = 0; k < kScalarItems; ++k) {
          const int64_t i = round + k * kThreads + threadIdx.x;
          if (i >= end) continue;
          const int64_t bin = p.bins.bin_of_fast(values[k], p.inv_range);
          if (bin < 0) continue;
          const int64_t s = one_sequence ? seq_lo : sequence_of(p.g, i, seq_lo, seq_hi);
          global_add(p.out + s * nbins + bin, weights[k]);
        }
      }
    }
  }
  if (p.shared_bins && current >= 0) {
    cache.spill(hist);
    flush();
  }
}

// index[i] = sequence * bins + bin of x[i], or -1 when histogram skips it.
template <class T>
__global__ void __launch_bounds__(kThreads)
    bin_index_kernel(const T* x, int64_t* index, int64_t n, HistogramBins<host::compute_t<T>> bins, ScanGeometry g) {
  using C = host::compute_t<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const int64_t bin = bins.bin_of(static_cast<C>(x[i]));
    index[i] = bin >= 0 ? sequence_of(g, i, 0, g.num_segments() - 1) * bins.bins + bin : -1;
  }
}

template <class T, class Acc>
void launch_histogram(const host::HistogramCall& c, const LaunchContext& ctx) {
  using C = host::compute_t<T>;
  using Shared = typename SharedBin<Acc>::type;
  HistogramParams<T, Acc> p;
  p.x = static_cast<const T*>(c.x);
  p.weights = static_cast<const Acc*>(c.weights);
  p.out = static_cast<Acc*>(c.out);
  p.n = c.n;
  p.bins = {static_cast<C>(c.lo), static_cast<C>(c.hi), c.bins};
  p.inv_range = C(1) / (p.bins.hi - p.bins.lo);
  p.scale = static_cast<C>(c.bins) * p.inv_range;
  p.g = c.sequences;
  const int64_t shared_bytes = (c.bins + 1) * static_cast<int64_t>(sizeof(Shared));  // + the wide path's spare slot
  p.shared_bins = shared_bytes <= kSharedBinBytes;
  p.wide = p.shared_bins && p.weights == nullptr && c.sequences.segments.offsets == nullptr && std::is_same_v<Acc, int64_t> &&
           reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  const int64_t tiles = (p.n + kTile - 1) / kTile;
  int64_t blocks = std::min<int64_t>(tiles, static_cast<int64_t>(ctx.sm_count) * kBlocksPerSM);
  blocks = std::max<int64_t>(blocks, (p.n + kMaxRunValues - 1) / kMaxRunValues);
  p.tiles_per_block = (tiles + blocks - 1) / blocks;
  blocks = (tiles + p.tiles_per_block - 1) / p.tiles_per_block;
  histogram_kernel<T, Acc><<<static_cast<unsigned>(blocks), kThreads, p.shared_bins ? shared_bytes : 0, ctx.stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class T>
void launch_bin_index(const host::HistogramCall& c, const LaunchContext& ctx) {
  using C = host::compute_t<T>;
  const int64_t blocks = std::min<int64_t>((c.n + kThreads - 1) / kThreads, 65536);
  bin_index_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, ctx.stream>>>(
      static_cast<const T*>(c.x), c.index, c.n, HistogramBins<C>{static_cast<C>(c.lo), static_cast<C>(c.hi), c.bins},
      c.sequences);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <class Acc>
void histogram_for(const host::HistogramCall& c, const LaunchContext& ctx) {
  host::visit_floating(c.dtype, [&](auto tag) { launch_histogram<typename decltype(tag)::type, Acc>(c, ctx); });
}

}  // namespace

void histogram(const host::HistogramCall& c, const LaunchContext& ctx) {
  if (c.index != nullptr) {
    return host::visit_floating(c.dtype, [&](auto tag) { launch_bin_index<typename decltype(tag)::type>(c, ctx); });
  }
  switch (c.out_dtype) {
    case c10::kLong: return histogram_for<int64_t>(c, ctx);
    case c10::kFloat: return histogram_for<float>(c, ctx);
    case c10::kDouble: return histogram_for<double>(c, ctx);
    default: TORCH_INTERNAL_ASSERT(false, "histogram: unexpected output dtype");
  }
}

}  // namespace parprims::cuda
