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

}  // namespace parprims::cuda
