// Device layer: decoupled look-back. Each tile publishes its aggregate as soon as it has it and
// its inclusive prefix once known; a tile's exclusive prefix is gathered from its predecessors,
// stopping at the first one whose prefix is known, or whose aggregate starts a segment (the
// segmented lift makes such an aggregate independent of anything before it).
#pragma once

#include <cuda/atomic>

#include <cstring>
#include <type_traits>

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

// Tile descriptors of one word each, for values of 4 or 8 bytes: the status and the value are
// read and written together (8 or 16 bytes, aligned: one access), so that a waiting lane needs
// one relaxed load per look, and publishing needs no fence. TileState's separate flag and value
// cost a round trip for the flag (an acquire) and another for the value, and a fence per
// publish: chained over 64 KB chunks (chained_scan.cuh), one window of 32 took about 2 us, which
// held one huge row to about 16 chunks a microsecond (H100 and H200 alike; benchmarks/NOTES.md).
// Zeroed memory is all invalid.
template <class T>
struct WordTileState {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8, "a status word holds a 4- or 8-byte value");
  static constexpr bool kWide = sizeof(T) == 8;
  // The status in the upper half of the word, the value's bits in the lower half.
  using Half = std::conditional_t<kWide, unsigned long long, unsigned int>;
  struct alignas(2 * sizeof(T)) Word {
    Half value_bits;
    Half status;
  };
  unsigned long long* counter = nullptr;
  Word* words = nullptr;

  __host__ __device__ __forceinline__ bool enabled() const { return counter != nullptr; }
  __device__ __forceinline__ unsigned long long claim_tile() const {
    return enabled() ? atomicAdd(counter, 1ull) : static_cast<unsigned long long>(blockIdx.x);
  }

  static size_t zeroed_bytes(int64_t tiles) { return 16 + align(tiles * sizeof(Word)); }
  static size_t bytes(int64_t tiles) { return zeroed_bytes(tiles); }
  static size_t align(size_t n) { return (n + 255) & ~size_t(255); }
  static WordTileState at(void* base, int64_t /*tiles*/) {
    char* p = static_cast<char*>(base);
    WordTileState s;
    s.counter = reinterpret_cast<unsigned long long*>(p);
    s.words = reinterpret_cast<Word*>(p + 16);
    return s;
  }

  static __device__ __forceinline__ void store_word(Word* p, const Word& w) {
    if constexpr (kWide) {
      asm volatile("st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(w.value_bits), "l"(w.status) : "memory");
    } else {
      const unsigned long long bits = (static_cast<unsigned long long>(w.status) << 32) | w.value_bits;
      ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>(*reinterpret_cast<unsigned long long*>(p))
          .store(bits, ::cuda::memory_order_relaxed);
    }
  }
  static __device__ __forceinline__ Word load_word(Word* p) {
    Word w;
    if constexpr (kWide) {
      asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];" : "=l"(w.value_bits), "=l"(w.status) : "l"(p) : "memory");
    } else {
      const unsigned long long bits =
          ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device>(*reinterpret_cast<unsigned long long*>(p))
              .load(::cuda::memory_order_relaxed);
      w.value_bits = static_cast<unsigned int>(bits);
      w.status = static_cast<unsigned int>(bits >> 32);
    }
    return w;
  }

  __device__ __forceinline__ void publish(int64_t tile, const T& v, TileStatus st) const {
    Word w;
    memcpy(&w.value_bits, &v, sizeof(T));
    w.status = static_cast<Half>(st);
    store_word(words + tile, w);
  }

  // Waits for tile `tile` to publish something; returns it, and whether it is a prefix.
  __device__ __forceinline__ T wait(int64_t tile, bool& is_prefix) const {
    Word w;
    while ((w = load_word(words + tile)).status == kInvalid) {
    }
    is_prefix = w.status == kPrefix;
    T v;
    memcpy(&v, &w.value_bits, sizeof(T));
    return v;
  }
};

// Warp-cooperative look-back over the tiles before `tile` in its chain (`step` apart): lanes
// inspect 32 predecessors at once. Called by one whole warp; every lane returns the prefix.
// `Mon` is the monoid of the published values (`State`: TileState or WordTileState); `starts_chain(v)` says whether an aggregate is
// independent of everything before it (a segment head under the segmented lift), which ends the
// look-back as a prefix does; `first` is the first tile of the chain.
template <class Mon, class State, class StartsChain>
__device__ __forceinline__ typename Mon::value_type look_back_warp(const State& state, int64_t tile, int64_t first,
                                                                   int64_t step, StartsChain starts_chain) {
  using T = typename Mon::value_type;
  const int lane = threadIdx.x & 31;
  T prefix = Mon::identity();
  for (int64_t base = tile - step; base >= first; base -= 32 * step) {
    const int64_t pred = base - lane * step;
    T v = Mon::identity();
    bool stop = true;
    if (pred >= first) {
      bool is_prefix;
      v = state.wait(pred, is_prefix);
      stop = is_prefix || starts_chain(v);
    }
    const unsigned stops = __ballot_sync(kFullMask, stop);
    const int nearest = stops ? __ffs(stops) - 1 : 31;
    if (lane > nearest) v = Mon::identity();
    const T window = shfl_idx(warp_reduce_backwards<Mon>(v), 0);
    prefix = Mon::combine(window, prefix);
    if (stops) break;
  }
  return prefix;
}

// The same under the segmented lift `Seg`: an aggregate that starts a segment ends the look-back.
template <class Seg>
__device__ __forceinline__ typename Seg::value_type look_back_warp(
    const TileState<typename Seg::value_type>& state, int64_t tile, int64_t first, int64_t step) {
  return look_back_warp<Seg>(state, tile, first, step, [](const typename Seg::value_type& v) { return v.head; });
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
