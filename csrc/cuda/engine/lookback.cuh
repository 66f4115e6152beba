// Device layer: decoupled look-back. Each tile publishes its aggregate as soon as it has it and
// its inclusive prefix once known; a tile's exclusive prefix is gathered from its predecessors,
// stopping at the first one whose prefix is known, or whose aggregate starts a segment (the
// segmented lift makes such an aggregate independent of anything before it).
#pragma once

#include <cuda/atomic>

#include "warp.cuh"

namespace parprims::cuda {

enum TileStatus : int { kInvalid = 0, kAggregate = 1, kPrefix = 2 };

template <class T>
__device__ __forceinline__ T load_bypassing_l1(const Words<T>* p) {
  Words<T> out;
  const int* src = reinterpret_cast<const int*>(p);
  int* dst = reinterpret_cast<int*>(&out);
#pragma unroll
  for (int i = 0; i < Words<T>::kCount; ++i) dst[i] = __ldcg(src + i);
  return out.value;
}

template <class T>
__device__ __forceinline__ void store_bypassing_l1(Words<T>* p, const T& v) {
  const Words<T> in{v};
  const int* src = reinterpret_cast<const int*>(&in);
  int* dst = reinterpret_cast<int*>(p);
#pragma unroll
  for (int i = 0; i < Words<T>::kCount; ++i) __stcg(dst + i, src[i]);
}

// Tile descriptors in a workspace: a tile counter (dynamic tile ids, so that every tile's
// predecessors started before it), then status flags, then aggregates and inclusive prefixes.
// The counter and the flags must be zero before the launch.
//
// A launch whose tiles never look back (a single tile) gets a null
// state instead, with no workspace: tiles take their id from blockIdx.x and publish nothing
// (`enabled()` is false). Kernels only look back from a tile whose predecessors in its chain
// exist, which such launches never have.
template <class T>
struct TileState {
  unsigned long long* counter = nullptr;
  int* status = nullptr;
  Words<T>* aggregate = nullptr;
  Words<T>* inclusive = nullptr;

  __host__ __device__ __forceinline__ bool enabled() const { return counter != nullptr; }

  // This block's tile id: the next from the counter (in start order), or blockIdx.x when the
  // state is disabled. Called by one thread per block.
  __device__ __forceinline__ unsigned long long claim_tile() const {
    return enabled() ? atomicAdd(counter, 1ull) : static_cast<unsigned long long>(blockIdx.x);
  }

  static size_t zeroed_bytes(int64_t tiles) { return 16 + align(tiles * sizeof(int)); }
  static size_t bytes(int64_t tiles) { return zeroed_bytes(tiles) + 2 * align(tiles * sizeof(Words<T>)); }
  static size_t align(size_t n) { return (n + 255) & ~size_t(255); }
  static TileState at(void* base, int64_t tiles) {
    char* p = static_cast<char*>(base);
    TileState s;
    s.counter = reinterpret_cast<unsigned long long*>(p);
    s.status = reinterpret_cast<int*>(p + 16);
    s.aggregate = reinterpret_cast<Words<T>*>(p + zeroed_bytes(tiles));
    s.inclusive = s.aggregate + align(tiles * sizeof(Words<T>)) / sizeof(Words<T>);
    return s;
  }

  __device__ __forceinline__ void publish(int64_t tile, const T& v, TileStatus st) const {
    store_bypassing_l1(st == kPrefix ? inclusive + tile : aggregate + tile, v);
    ::cuda::atomic_ref<int, ::cuda::thread_scope_device> flag(status[tile]);
    flag.store(st, ::cuda::memory_order_release);
  }

  // Waits for tile `tile` to publish something; returns it, and whether it is a prefix.
  __device__ __forceinline__ T wait(int64_t tile, bool& is_prefix) const {
    ::cuda::atomic_ref<int, ::cuda::thread_scope_device> flag(status[tile]);
    int st;
    while ((st = flag.load(::cuda::memory_order_acquire)) == kInvalid) {
    }
    is_prefix = st == kPrefix;
    return load_bypassing_l1(is_prefix ? inclusive + tile : aggregate + tile);
  }
};

// Warp-cooperative look-back over the tiles before `tile` in its chain (`step` apart): lanes
// inspect 32 predecessors at once. Called by one whole warp; every lane returns the prefix.
// `Seg` is the segmented lift; `first` is the first tile of the chain.
template <class Seg>
__device__ __forceinline__ typename Seg::value_type look_back_warp(
    const TileState<typename Seg::value_type>& state, int64_t tile, int64_t first, int64_t step) {
  using T = typename Seg::value_type;
  const int lane = threadIdx.x & 31;
  T prefix = Seg::identity();
  for (int64_t base = tile - step; base >= first; base -= 32 * step) {
    const int64_t pred = base - lane * step;
    T v = Seg::identity();
    bool stop = true;
    if (pred >= first) {
      bool is_prefix;
      v = state.wait(pred, is_prefix);
      stop = is_prefix || v.head;
    }
    const unsigned stops = __ballot_sync(kFullMask, stop);
    const int nearest = stops ? __ffs(stops) - 1 : 31;
    if (lane > nearest) v = Seg::identity();
    const T window = shfl_idx(warp_reduce_backwards<Seg>(v), 0);
    prefix = Seg::combine(window, prefix);
    if (stops) break;
  }
  return prefix;
}

// The deterministic carry-in: the predecessor's inclusive prefix and nothing else, so that the
// rounding never depends on timing (a serial chain; slower for rows of many tiles).
template <class Seg>
__device__ __forceinline__ typename Seg::value_type wait_for_prefix(
    const TileState<typename Seg::value_type>& state, int64_t pred) {
  while (true) {
    bool is_prefix;
    const auto v = state.wait(pred, is_prefix);
    if (is_prefix || v.head) return v;  // an aggregate that starts a segment is its own prefix
  }
}

// ---- counts: status and value in one word ----

// The look-back state of a scan of counts (the compaction's kept elements): each tile's count
// and its status share one 64-bit word (status in the top two bits, the count below), so a
// predecessor costs one load, and a flag can never be seen before its value. Counts stay below
// 2^62. The counter and the words must be zero before the launch.
struct CountTileState {
  unsigned long long* counter = nullptr;
  unsigned long long* words = nullptr;

  static constexpr int kStatusShift = 62;
  static constexpr unsigned long long kCountMask = (1ull << kStatusShift) - 1;

  __host__ __device__ __forceinline__ bool enabled() const { return counter != nullptr; }

  static size_t bytes(int64_t tiles) { return static_cast<size_t>(tiles + 1) * sizeof(unsigned long long); }
  static CountTileState at(void* base) {
    CountTileState s;
    s.counter = static_cast<unsigned long long*>(base);
    s.words = s.counter + 1;
    return s;
  }

  // As TileState::claim_tile: dynamic ids (every tile's predecessors started before it).
  __device__ __forceinline__ unsigned long long claim_tile() const {
    return enabled() ? atomicAdd(counter, 1ull) : static_cast<unsigned long long>(blockIdx.x);
  }

  __device__ __forceinline__ void publish(int64_t tile, unsigned long long count, TileStatus st) const {
    ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> word(words[tile]);
    word.store((static_cast<unsigned long long>(st) << kStatusShift) | count, ::cuda::memory_order_relaxed);
  }

  __device__ __forceinline__ unsigned long long load(int64_t tile) const {
    ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> word(words[tile]);
    return word.load(::cuda::memory_order_relaxed);
  }

  static __device__ __forceinline__ int status_of(unsigned long long word) {
    return static_cast<int>(word >> kStatusShift);
  }
};

// Warp-cooperative look-back over counts: lane i reads the tile i+1 places back, the warp
// waits until all 32 have published, adds the counts up to the nearest inclusive prefix, and
// moves 32 tiles back if there is none. Called by one whole warp of a tile > 0; every lane
// returns the tile's exclusive prefix (the kept elements before it).
__device__ __forceinline__ unsigned long long look_back_counts(const CountTileState& state, int64_t tile) {
  const int lane = threadIdx.x & 31;
  unsigned long long prefix = 0;
  for (int64_t base = tile - 1;; base -= 32) {
    const int64_t pred = base - lane;
    // Before the first tile: an inclusive prefix of nothing.
    unsigned long long word = pred >= 0 ? state.load(pred) : static_cast<unsigned long long>(kPrefix) << CountTileState::kStatusShift;
    while (__any_sync(kFullMask, CountTileState::status_of(word) == kInvalid)) {
      if (CountTileState::status_of(word) == kInvalid) word = state.load(pred);
    }
    const unsigned prefixes = __ballot_sync(kFullMask, CountTileState::status_of(word) == kPrefix);
    const int nearest = prefixes ? __ffs(prefixes) - 1 : 31;
    const unsigned long long count = lane <= nearest ? word & CountTileState::kCountMask : 0;
    prefix += warp_reduce<Add<unsigned long long>>(count);
    if (prefixes) return prefix;
  }
}

}  // namespace parprims::cuda
