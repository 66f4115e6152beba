// The CUDA histogram: privatized bins per block in shared memory, added to the output once per
// block (and whenever the block's run of tiles moves on to another sequence).
//
// A block takes a contiguous run of tiles (kThreads x kItems values each). A tile inside one
// sequence adds into the block's shared bins. Without sequences and weights, when x is 16-byte
// aligned (the common call), the block's full tiles take a lean path: 16-byte loads, the next
// tile's loads in flight while the current one is binned, and a branch-free bin per value in
// float (LeanBinsF32: two FMAs give a fixed-point word whose high bits are the slot and whose
// low bits flag the rare value near a bin edge, which bin_of decides). Each thread keeps its
// last bin and the count (or weight sum) gathered for it in registers and adds them to shared
// memory only when the bin changes: skewed data (most values in one bin) then adds to a bin for
// a small fraction of its values (the lean path adds the rest to the lane's idle word, a shared
// add per value without a branch), and uniform data costs one shared atomic per value (a
// warp-wide match of equal bins per value, tried first, cost more than the atomics it saved:
// 2.27 ms for 2^28 uniform values on an H200, 0.11 of the copy bandwidth). A tile that straddles
// sequences (many short ones) adds each value straight into the output with a global atomic.
// Counts are 32-bit in shared memory (a block adds fewer than 2^32 values between flushes) and
// 64-bit in the output, so they are exact at any count. Nothing is read back to the host.
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cmath>
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
constexpr int kLanes = 32;
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

// The lean path's count cache: the address of the slot whose run of values the thread counts and
// the run's length. Branch-free: every value makes one shared add, of the run to its slot when
// the address changes and otherwise to the thread's idle word (one per lane, never flushed: a
// predicated add would be compiled as a branch around it). Out-of-range values and NaN have
// spare slots, so a value costs no test beyond the address comparison.
struct CountCache {
  unsigned addr;  // the shared-memory address of the run's slot
  unsigned idle;  // the lane's idle word
  unsigned amount = 0;
  __device__ explicit CountCache(unsigned idle_word) : addr(idle_word), idle(idle_word) {}
  __device__ __forceinline__ void add(unsigned a) {
    const bool changed = a != addr;
    red_shared(changed ? addr : idle, amount);
    amount = changed ? 1u : amount + 1u;
    addr = a;
  }
  __device__ __forceinline__ void spill() const { red_shared(addr, amount); }
  __device__ static __forceinline__ void red_shared(unsigned address, unsigned v) {
    asm volatile("red.shared.add.u32 [%0], %1;" ::"r"(address), "r"(v) : "memory");
  }
};

// The lean path's binning in float (float, half and bfloat16 values), for bins + 2 <= 2^14.
// Per value: d = v - lo (as bin_of computes it), u = saturate(d * mul + add) ~ (q + 1/2) / (bins + 1)
// where q = d * scale is bin_of_lean's product (NaN saturates to 0, infinities to 0 or 1), then
// fixed point t = u * fix_mul + fix_add, rounded to an integer by the addition of 2^23: the
// float's bits are 0x4B000000 + (q + 1) * 2^shift + margin, rounded. Its bits above `shift` are
// the slot (bin + 1; 0 below the range, bins + 1 above it) and its low `shift` bits, less than
// 2 * margin, flag a value within margin / 2^shift of a bin edge, which bin_of decides.
// The slot is bin_of's for every other value: host-side make_lean_bins has the error bound.
struct LeanBinsF32 {
  float lo;
  float mul;       // scale / (bins + 1)
  float add;       // 0.5 / (bins + 1)
  float fix_mul;   // (bins + 1) * 2^shift
  float fix_add;   // 2^23 + 2^(shift - 1) + margin
  int shift;       // the fixed point's fraction bits
  int frac_shift;  // 32 - shift
  unsigned edge_limit;   // (2 * margin) << frac_shift: a value whose fraction bits, shifted up, are below it is near an edge
  unsigned word_offset;  // 4 * (0x4B000000 >> shift): a word's slot address is (word >> shift) * 4 - word_offset + slot 0's
};

__device__ __forceinline__ unsigned lean_word(float v, const LeanBinsF32& b) {
  float u;
  asm("fma.rn.sat.f32 %0, %1, %2, %3;" : "=f"(u) : "f"(v - b.lo), "f"(b.mul), "f"(b.add));
  return __float_as_uint(__fmaf_rn(u, b.fix_mul, b.fix_add));
}

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
  host::compute_t<T> scale;      // bins * inv_range, for bin_of_lean (double values' lean path)
  LeanBinsF32 lean{};            // the lean path's binning of float values
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
// vectors of V = 16 / sizeof(T) values, a warp's vectors consecutive. A vector's registers take
// the next tile's vector as soon as its values are binned (the last tile loads itself again, from
// L2), so a tile's loads are in flight while the rest of the tile is binned. `slots`: slot 0 (the
// spare below), the bins, slot bins + 1 (the spare above); the kLanes words before slot 0 are the
// lanes' idle words.
template <class T, class Acc>
__device__ __forceinline__ void bin_wide_tiles(const HistogramParams<T, Acc>& p, unsigned* slots, int64_t tile,
                                               int64_t end_tile) {
  using C = host::compute_t<T>;
  constexpr int V = 16 / static_cast<int>(sizeof(T));
  constexpr int kVectors = kItems / V;
  static_assert(kItems % V == 0, "whole vectors per thread");
  const unsigned slot0 = static_cast<unsigned>(__cvta_generic_to_shared(slots));
  CountCache cache(slot0 - 4u * (kLanes - (threadIdx.x % kLanes)));
  const int4* src = reinterpret_cast<const int4*>(p.x + tile * kTile) + threadIdx.x;  // aligned: checked on the host
  int4 vec[kVectors];
#pragma unroll
  for (int k = 0; k < kVectors; ++k) vec[k] = src[k * kThreads];
  // The slot of value v's word w (float): slot0 + 4 * ((w >> shift) - (0x4B000000 >> shift)).
  const unsigned word_base = slot0 - p.lean.word_offset;
  for (int left = static_cast<int>(end_tile - tile); left > 0; --left) {
    const int4* next = left > 1 ? src + kTile / V : src;
#pragma unroll
    for (int k = 0; k < kVectors; ++k) {
      unsigned addr[V];
      if constexpr (std::is_same_v<C, float>) {
        unsigned word[V];
        bool near_edge = false;
#pragma unroll
        for (int j = 0; j < V; ++j) {
          word[j] = lean_word(static_cast<float>(vector_element<T>(vec[k], j)), p.lean);
          addr[j] = word_base + ((word[j] >> p.lean.shift) << 2);
          near_edge |= (word[j] << p.lean.frac_shift) < p.lean.edge_limit;
        }
        if (__any_sync(0xffffffffu, near_edge)) {  // rare: bin_of decides the values near an edge
#pragma unroll
          for (int j = 0; j < V; ++j) {
            if ((word[j] << p.lean.frac_shift) < p.lean.edge_limit) {
              const int bin = static_cast<int>(p.bins.bin_of(static_cast<float>(vector_element<T>(vec[k], j))));
              addr[j] = slot0 + 4u * static_cast<unsigned>(bin + 1);
            }
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          const int bin = p.bins.bin_of_lean(static_cast<C>(vector_element<T>(vec[k], j)), p.scale, -1);
          addr[j] = slot0 + 4u * static_cast<unsigned>(bin + 1);
        }
      }
      vec[k] = next[k * kThreads];
#pragma unroll
      for (int j = 0; j < V; ++j) cache.add(addr[j]);
    }
    src = next;
  }
  cache.spill();
}

template <class T, class Acc>
__global__ void __launch_bounds__(kThreads, kBlocksPerSM) histogram_kernel(const HistogramParams<T, Acc> p) {
  using C = host::compute_t<T>;
  using Shared = typename SharedBin<Acc>::type;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // The lean path's kLanes idle words, then its spare slot 0, the bins, its spare slot bins + 1
  // (none of them flushed).
  Shared* hist = reinterpret_cast<Shared*>(smem_raw) + kLanes + 1;
  __shared__ int64_t tile_sequences[2];
  const int64_t nbins = p.bins.bins;
  BinCache<Shared, Acc> cache;

  if (p.shared_bins) {
    for (int64_t j = threadIdx.x; j < nbins; j += kThreads) hist[j] = Shared(0);
    __syncthreads();  // zeroed before any thread adds to them
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
      if constexpr (std::is_same_v<Shared, unsigned>) bin_wide_tiles(p, hist - 1, first_tile, full_end);
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

// The constants of LeanBinsF32 for `bins` bins over [lo, hi] in float, or false when the lean
// binning does not apply (too many bins, or a range so narrow or wide that a constant below is
// not a normal float): such calls take the general path.
//
// Why the slot is bin_of's away from the flagged edges. With u = 2^-24 (half an ulp), D = d * bins
// / R exactly (d = v - lo and R = hi - lo as float computes them), bin_of's quotient q0 =
// fl(fl(d * bins) / R) is within (2u + u^2) D of D. Here scale = fl(bins * fl(1 / R)), mul =
// fl(scale / (bins + 1)) and add = fl(0.5 / (bins + 1)) carry 4 roundings of relative size <= u,
// and the saturated FMA one more, so y = fl(d * mul + add) * (bins + 1) is within 4.0001u D +
// 1.0001u of D + 1/2; q = y - 1/2 is within 6.0002u D + 1.0001u of q0, which for D <= bins + 1
// (every value in the range or near it) is below the edge margin m = kEdgeMargin * bins = 16u *
// bins. The fixed-point FMA rounds y * 2^shift to an integer (exact product, one rounding to the
// ulp 1 of [2^23, 2^24]), so its fixed point g ~ q * 2^shift is within 1/2 of q * 2^shift. A value
// is flagged when g is within `margin` of a multiple of 2^shift; otherwise q is at least (margin -
// 1/2) / 2^shift >= m from every integer, further than q0 is from q, so floor(g / 2^shift) =
// floor(q) = floor(q0). A value above hi has D >= bins, a value below lo d < 0: the slot is a
// spare or the value is flagged; a value in [lo, hi] has D <= bins: its slot is at most bins or it
// is flagged (bin_of's clamp of a quotient that rounds up to bins). NaN and +-inf saturate u.
bool make_lean_bins(float lo, float hi, int64_t bins, LeanBinsF32& b) {
  if (bins + 2 > (int64_t(1) << 14)) return false;
  const float range = hi - lo;
  const float inv = 1.0f / range;
  const float scale = static_cast<float>(bins) * inv;  // as launch_histogram's p.scale
  const float slots = static_cast<float>(bins + 1);
  b.lo = lo;
  b.mul = scale / slots;
  b.add = 0.5f / slots;
  if (!(std::isnormal(range) && std::isnormal(inv) && std::isnormal(scale) && std::isnormal(b.mul) &&
        std::isnormal(b.add))) {
    return false;
  }
  int shift = 22;  // the most fraction bits that keep (bins + 2) * 2^shift <= 2^23 (at least 9)
  while ((bins + 2) << shift > (int64_t(1) << 23)) --shift;
  // margin >= m * 2^shift + 1/2 (m = kEdgeMargin * bins, a power of two times bins: exact in double)
  const int margin = static_cast<int>(std::ceil(HistogramBins<float>::kEdgeMargin * static_cast<double>(bins) *
                                                std::ldexp(1.0, shift) + 0.5));
  if (2 * margin >= (1 << (shift - 1))) return false;  // the spares' fixed points must stay unflagged
  b.fix_mul = static_cast<float>((bins + 1) << shift);
  b.fix_add = static_cast<float>((int64_t(1) << 23) + (int64_t(1) << (shift - 1)) + margin);
  b.shift = shift;
  b.frac_shift = 32 - shift;
  b.edge_limit = static_cast<unsigned>(2 * margin) << (32 - shift);
  b.word_offset = 4u * (0x4B000000u >> shift);
  return true;
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
  // + the lean path's idle words and spare slots (not counted against kSharedBinBytes)
  const int64_t shared_bytes = (c.bins + kLanes + 2) * static_cast<int64_t>(sizeof(Shared));
  p.shared_bins = (c.bins + 1) * static_cast<int64_t>(sizeof(Shared)) <= kSharedBinBytes;
  bool lean_bins = true;
  if constexpr (std::is_same_v<C, float>) lean_bins = make_lean_bins(p.bins.lo, p.bins.hi, c.bins, p.lean);
  p.wide = p.shared_bins && lean_bins && p.weights == nullptr && c.sequences.segments.offsets == nullptr &&
           std::is_same_v<Acc, int64_t> && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
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
