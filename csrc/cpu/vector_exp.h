// exp over arrays of floats, four at a time in the compiler's vector extension (an SSE or NEON
// register): the selective scan's gates exp(delta * A) are most of its CPU time, and the
// library's build has no -march flags for the compiler to vectorize std::exp with.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace parprims::cpu {

typedef float Float4 __attribute__((vector_size(16)));
typedef int32_t Int4 __attribute__((vector_size(16)));

// 2^k * p(r) with r = x - k ln 2 (|r| <= ln 2 / 2) and Cephes' expf polynomial: relative error
// below 1e-7 (measured against double over [-87, 88.37]). Below -87 gives 0 (no subnormals),
// between 88.37 and float's overflow at 88.72 it stays at exp(88.37) = 2^127.5, above that it
// is inf; NaN stays NaN.
inline Float4 exp4(Float4 x) {
  const Float4 lo = Float4{} - 87.0f, hi = Float4{} + 88.3762626647949f;  // k <= 127
  const Float4 c = x < lo ? lo : (x > hi ? hi : x);
  const Float4 magic = Float4{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const Float4 shifted = c * 1.44269504088896341f + magic;
  const Float4 k = shifted - magic;
  const Float4 r = (c - k * 0.693359375f) - k * -2.12194440e-4f;  // ln 2 in two parts
  Float4 p = Float4{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = (p * r) * r + r + 1.0f;
  Int4 k_bits;
  std::memcpy(&k_bits, &shifted, sizeof k_bits);  // 0x4B400000 + k: no float-to-int conversion
  const Int4 scale_bits = (k_bits - 0x4B400000 + 127) << 23;  // the float 2^k
  Float4 scale;
  std::memcpy(&scale, &scale_bits, sizeof scale);
  const Float4 e = p * scale;
  const Float4 overflow = Float4{} + 88.72283935546875f, inf = Float4{} + INFINITY;
  const Float4 result = x < lo ? Float4{} : (x > overflow ? inf : e);
  return x != x ? x : result;  // NaN in, NaN out
}

// x[i] = exp(x[i]) for i in [0, n).
inline void exp_in_place(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    Float4 v;
    std::memcpy(&v, x + i, sizeof v);
    v = exp4(v);
    std::memcpy(x + i, &v, sizeof v);
  }
  if (i < n) {
    Float4 v{};
    std::memcpy(&v, x + i, (n - i) * sizeof(float));
    v = exp4(v);
    std::memcpy(x + i, &v, (n - i) * sizeof(float));
  }
}

inline void exp_in_place(double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

}  // namespace parprims::cpu
