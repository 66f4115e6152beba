// Wide loads and stores of N consecutive elements (16, 8 or 4 bytes per access) for device
// code, when the address is aligned; the caller falls back to element accesses otherwise.
// On the host these report failure, so the CPU engine always takes the element path.
#pragma once

#include <cstdint>
#include <cstring>

#include "macros.h"

namespace parprims {

#if defined(__CUDACC__)
namespace detail {
template <int kBytes>
struct WideWord;
template <>
struct WideWord<16> {
  using type = int4;
};
template <>
struct WideWord<8> {
  using type = int2;
};
template <>
struct WideWord<4> {
  using type = int;
};

}  // namespace detail
#endif

namespace detail {
// The access width of N consecutive T (bytes; 0: element accesses only).
template <int N, class T>
constexpr int wide_bytes() {
  constexpr int total = N * static_cast<int>(sizeof(T));
  return total % 16 == 0 ? 16 : total % 8 == 0 ? 8 : total % 4 == 0 ? 4 : 0;
}
}  // namespace detail

template <int N, class T>
PP_HD bool load_wide(const T* p, T (&out)[N]) {
#if defined(__CUDA_ARCH__)
  constexpr int kWide = detail::wide_bytes<N, T>();
  if constexpr (kWide == 0) {
    return false;
  } else {
    using W = typename detail::WideWord<kWide>::type;
    if (reinterpret_cast<uintptr_t>(p) % kWide != 0) return false;
    constexpr int kWords = N * static_cast<int>(sizeof(T)) / kWide;
    W words[kWords];
#pragma unroll
    for (int i = 0; i < kWords; ++i) words[i] = reinterpret_cast<const W*>(p)[i];
    memcpy(static_cast<void*>(out), words, sizeof(words));
    return true;
  }
#else
  (void)p;
  (void)out;
  return false;
#endif
}

template <int N, class T>
PP_HD bool store_wide(T* p, const T (&in)[N]) {
#if defined(__CUDA_ARCH__)
  constexpr int kWide = detail::wide_bytes<N, T>();
  if constexpr (kWide == 0) {
    return false;
  } else {
    using W = typename detail::WideWord<kWide>::type;
    if (reinterpret_cast<uintptr_t>(p) % kWide != 0) return false;
    constexpr int kWords = N * static_cast<int>(sizeof(T)) / kWide;
    W words[kWords];
    memcpy(words, static_cast<const void*>(in), sizeof(words));
#pragma unroll
    for (int i = 0; i < kWords; ++i) reinterpret_cast<W*>(p)[i] = words[i];
    return true;
  }
#else
  (void)p;
  (void)in;
  return false;
#endif
}

}  // namespace parprims
