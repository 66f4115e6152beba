// Wide loads and stores of N consecutive elements (16, 8 or 4 bytes per access) for device
// code, when the address is aligned; the caller falls back to element accesses otherwise.
// On the host these report failure, so the CPU engine always takes the element path.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

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

// Reads the N consecutive T at `p` in accesses of wide_bytes<N, T>() into the N * sizeof(T)
// bytes at `out`; false (nothing read) when `p` is not aligned for them, for sizes without a
// wide access, and on the host.
template <int N, class T>
PP_HD bool load_wide_bytes(const T* p, void* out) {
#if defined(__CUDA_ARCH__)
  constexpr int kWide = wide_bytes<N, T>();
  if constexpr (kWide == 0) {
    return false;
  } else {
    using W = typename WideWord<kWide>::type;
    if (reinterpret_cast<uintptr_t>(p) % kWide != 0) return false;
    constexpr int kWords = N * static_cast<int>(sizeof(T)) / kWide;
    W words[kWords];
    PP_UNROLL
    for (int i = 0; i < kWords; ++i) words[i] = reinterpret_cast<const W*>(p)[i];
    memcpy(out, words, sizeof(words));
    return true;
  }
#else
  (void)p;
  (void)out;
  return false;
#endif
}
}  // namespace detail

template <int N, class T>
PP_HD bool load_wide(const T* p, T (&out)[N]) {
  return detail::load_wide_bytes<N>(p, static_cast<void*>(out));
}

// Runs of N elements of T as they were loaded, held until they are used. A kernel that loads
// the next tile while it works on the current one holds it this way: a half-precision value
// converted at its load would make the thread wait for the load right there (the conversion
// reads the loaded register), so the load would overlap nothing. Held as loaded, the
// registers are not read until `get`. Two layouts, with the same interface:
//   PackedRun:   the elements packed in 32-bit words, for wide loads (16 bytes fill 4 words);
//   WidenedRun:  one element a register (a 2-byte load fills its register, zero-extended), for
//                element loads: packing two of them into a word would read both at once.
template <class T, int N>
struct PackedRun {
  static constexpr int kWords = (N * static_cast<int>(sizeof(T)) + 3) / 4;
  uint32_t words[kWords];

  // Loads the N elements from `p` in wide accesses; false (nothing loaded) when the address
  // is not aligned for them, on the host, or for element sizes that do not tile a word.
  PP_HD bool load_wide(const T* p) {
    if constexpr ((N * sizeof(T)) % 4 != 0) {
      return false;
    } else {
      return detail::load_wide_bytes<N>(p, static_cast<void*>(words));
    }
  }
  // (By value: a copy made in registers, so that memcpy does not read memory byte by byte.)
  PP_HD void set(int k, const T v) { memcpy(reinterpret_cast<char*>(words) + k * sizeof(T), &v, sizeof(T)); }
  PP_HD T get(int k) const {
    T v;
    memcpy(&v, reinterpret_cast<const char*>(words) + k * sizeof(T), sizeof(T));
    return v;
  }
};

template <class T, int N>
struct WidenedRun {
  // Elements narrower than a word take a whole one; wider ones are held as they are.
  using Word = std::conditional_t<sizeof(T) == 1, uint8_t, std::conditional_t<sizeof(T) == 2, uint16_t, T>>;
  static constexpr bool kNarrow = sizeof(T) < 4;
  std::conditional_t<kNarrow, uint32_t, T> items[N];

  PP_HD bool load_wide(const T*) { return false; }
  PP_HD void set(int k, const T v) {
    if constexpr (kNarrow) {
      Word bits;
      memcpy(&bits, &v, sizeof(T));
      items[k] = bits;
    } else {
      items[k] = v;
    }
  }
  PP_HD T get(int k) const {
    if constexpr (kNarrow) {
      const Word bits = static_cast<Word>(items[k]);
      T v;
      memcpy(&v, &bits, sizeof(T));
      return v;
    } else {
      return items[k];
    }
  }
};

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
    PP_UNROLL
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
