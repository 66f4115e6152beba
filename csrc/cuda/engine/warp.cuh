// Warp layer: shuffles of any trivially copyable value, and the warp-wide inclusive scan.
#pragma once

#include "../../core/monoids.h"

namespace parprims::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// Values travel as whole 32-bit words (a bool-sized value is padded up to one word).
template <class T>
struct alignas(alignof(T) < 4 ? 4 : alignof(T)) Words {
  T value;
  static constexpr int kCount = static_cast<int>(sizeof(T) + 3) / 4;
};

// Moves a value word by word through `shuffle_word(int) -> int` (one warp shuffle).
template <class T, class ShuffleWord>
__device__ __forceinline__ T shuffle_words(const T& v, ShuffleWord shuffle_word) {
  Words<T> in{v}, out;
  const int* src = reinterpret_cast<const int*>(&in);
  int* dst = reinterpret_cast<int*>(&out);
#pragma unroll
  for (int i = 0; i < Words<T>::kCount; ++i) dst[i] = shuffle_word(src[i]);
  return out.value;
}

template <class T>
__device__ __forceinline__ T shfl_up(const T& v, int delta) {
  return shuffle_words(v, [delta](int w) { return __shfl_up_sync(kFullMask, w, delta); });
}

template <class T>
__device__ __forceinline__ T shfl_down(const T& v, int delta) {
  return shuffle_words(v, [delta](int w) { return __shfl_down_sync(kFullMask, w, delta); });
}

template <class T>
__device__ __forceinline__ T shfl_idx(const T& v, int lane) {
  return shuffle_words(v, [lane](int w) { return __shfl_sync(kFullMask, w, lane); });
}

// `v`, waited for here, where `v` is the same in every lane of the warp (every lane must call
// this): a warp reduction (OR of identical words) reads it at once. All of a thread's
// outstanding global loads share one scoreboard (ptxas, sm_90), so a value loaded on a rare
// path (a unit's entering carry, a row's initial state) whose first use comes after the next
// tile's loads were issued makes that use wait for those loads too; and a value carried around
// a loop makes every iteration wait there, on the next tile's loads. (A shuffle from the
// thread's own lane would do for any value, but ptxas folds it away.)
template <class T>
__device__ __forceinline__ T settled_uniform(const T& v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return shuffle_words(v, [](int w) { return static_cast<int>(__reduce_or_sync(kFullMask, static_cast<unsigned>(w))); });
#else
  return v;  // (no warp reductions before sm_80; the value is the same, only the wait moves)
#endif
}

// `v`, waited for here, for a value that may differ between lanes (the reason is
// settled_uniform's): a butterfly shuffle with distance 0 hands each lane its own word, and
// ptxas keeps it (a shuffle from the lane's own index it folds away). Every lane must call it.
template <class T>
__device__ __forceinline__ T settled_any(const T& v) {
  return shuffle_words(v, [](int w) { return __shfl_xor_sync(kFullMask, w, 0); });
}

// Inclusive scan across the lanes of a warp (Kogge-Stone: log2(32) steps); lane 0 is earliest.
template <class M>
__device__ __forceinline__ typename M::value_type warp_inclusive_scan(typename M::value_type v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int delta = 1; delta < 32; delta <<= 1) {
    const auto earlier = shfl_up(v, delta);
    if (lane >= delta) v = M::combine(earlier, v);
  }
  return v;
}

// Combines every lane's value in lane order (pairs, then pairs of pairs: the same order on every
// run) and gives the total to every lane.
template <class M>
__device__ __forceinline__ typename M::value_type warp_reduce(typename M::value_type v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int delta = 1; delta < 32; delta <<= 1) {
    const auto later = shfl_down(v, delta);
    if (lane + delta < 32) v = M::combine(v, later);
  }
  return shfl_idx(v, 0);
}

// Combines the lanes' values with lane 31 the earliest and lane 0 the latest; lane 0 gets it.
// (The look-back window: lane i holds the tile i+1 places back.)
template <class M>
__device__ __forceinline__ typename M::value_type warp_reduce_backwards(typename M::value_type v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int delta = 1; delta < 32; delta <<= 1) {
    const auto earlier = shfl_down(v, delta);
    if (lane + delta < 32) v = M::combine(earlier, v);
  }
  return v;
}

}  // namespace parprims::cuda
