// Sums of kRows side-by-side elements, position after position, in vector registers: the fold
// of a masked mean over rows that sit next to each other in memory (cpu/reduce_engine.h). GCC's
// vector extensions of 16 bytes (a register of the baseline x86-64 the extension builds for,
// and of ARM's NEON), since the compiler left the plain loop scalar: bfloat16 widened by a
// shift of each lane, float widened to double by a vector conversion.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace parprims::cpu {

namespace lanes {
typedef float Float4 __attribute__((vector_size(16)));
typedef float Float2 __attribute__((vector_size(8)));
typedef double Double2 __attribute__((vector_size(16)));
typedef uint16_t Bits16x4 __attribute__((vector_size(8)));
typedef uint32_t Bits32x4 __attribute__((vector_size(16)));

template <class Sum>
using Vector = std::conditional_t<std::is_same_v<Sum, float>, Float4, Double2>;

// The 16 / sizeof(Sum) elements from x, widened to Sum.
template <class Sum, class In>
Vector<Sum> load(const In* x) {
  Vector<Sum> v;
  if constexpr (std::is_same_v<In, c10::BFloat16> && std::is_same_v<Sum, float>) {
    Bits16x4 raw;
    std::memcpy(&raw, x, sizeof raw);
    const Bits32x4 bits = __builtin_convertvector(raw, Bits32x4) << 16;  // float's top half
    std::memcpy(&v, &bits, sizeof v);
  } else if constexpr (std::is_same_v<In, Sum>) {
    std::memcpy(&v, x, sizeof v);
  } else if constexpr (std::is_same_v<In, float> && std::is_same_v<Sum, double>) {
    Float2 narrow;
    std::memcpy(&narrow, x, sizeof narrow);
    v = __builtin_convertvector(narrow, Double2);
  } else {  // float16: converted one by one
    for (int i = 0; i < static_cast<int>(sizeof v / sizeof(Sum)); ++i) v[i] = static_cast<Sum>(x[i]);
  }
  return v;
}
}  // namespace lanes

template <class Sum, int kRows>
struct LaneSums {
  static_assert(std::is_same_v<Sum, float> || std::is_same_v<Sum, double>);
  static constexpr int kLanes = 16 / sizeof(Sum);
  static constexpr int kVectors = (kRows + kLanes - 1) / kLanes;
  lanes::Vector<Sum> total[kVectors] = {};
  Sum tail[kRows] = {};  // rows beyond the whole vectors (kRows not a multiple of kLanes)

  template <class In>
  void add(const In* x) {
    if constexpr (kRows % kLanes == 0) {
      for (int k = 0; k < kVectors; ++k) total[k] += lanes::load<Sum>(x + k * kLanes);
    } else {
      for (int r = 0; r < kRows; ++r) tail[r] += static_cast<Sum>(x[r]);
    }
  }

  Sum operator[](int r) const {
    if constexpr (kRows % kLanes == 0) return total[r / kLanes][r % kLanes];
    return tail[r];
  }
};

}  // namespace parprims::cpu
