// The associative operators of the library: the only place their algebra lives.
//
// A monoid is a struct with
//   using value_type = ...;
//   static value_type identity();
//   static value_type combine(const value_type& earlier, const value_type& later);
// Operand order is fixed, `combine(earlier, later)`, and nothing may assume commutativity: the
// affine monoid is not commutative. The same structs are used by the CPU and the CUDA engine.
// Torch-free: the element types are template parameters (float, double, int64_t, c10::complex).
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "macros.h"

namespace parprims {

// ---- numeric helpers ---------------------------------------------------------------------

template <class T>
PP_HD bool is_nan(const T& x) {
  if constexpr (std::is_floating_point_v<T>) {
    return x != x;
  } else {
    return false;
  }
}

template <class T>
PP_HD T lowest_value() {
  if constexpr (std::is_floating_point_v<T>) {
    return -std::numeric_limits<T>::infinity();
  } else if constexpr (std::is_same_v<T, bool>) {
    return false;
  } else {
    return std::numeric_limits<T>::lowest();
  }
}

template <class T>
PP_HD T highest_value() {
  if constexpr (std::is_floating_point_v<T>) {
    return std::numeric_limits<T>::infinity();
  } else if constexpr (std::is_same_v<T, bool>) {
    return true;
  } else {
    return std::numeric_limits<T>::max();
  }
}

PP_HD float pp_exp(float x) { return ::expf(x); }
PP_HD double pp_exp(double x) { return ::exp(x); }
PP_HD float pp_log1p(float x) { return ::log1pf(x); }
PP_HD double pp_log1p(double x) { return ::log1p(x); }

// ---- elementwise monoids -----------------------------------------------------------------

template <class T>
struct Add {
  using value_type = T;
  static PP_HD T identity() { return T(0); }
  static PP_HD T combine(const T& earlier, const T& later) { return earlier + later; }
};

template <class T>
struct Mul {
  using value_type = T;
  static PP_HD T identity() { return T(1); }
  static PP_HD T combine(const T& earlier, const T& later) { return earlier * later; }
};

// max/min propagate NaN (the first NaN wins), as torch.cummax does.
template <class T>
struct Max {
  using value_type = T;
  static PP_HD T identity() { return lowest_value<T>(); }
  static PP_HD T combine(const T& earlier, const T& later) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    // One instruction that propagates NaN (the general form below is three or four; the
    // segment-reduce stream pass ran 1.76x sum's instructions with it). It gives a canonical NaN
    // and +0 for max(-0, +0), where the general form keeps the earlier value.
    if constexpr (std::is_same_v<T, float>) {
      float r;
      asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(earlier), "f"(later));
      return r;
    }
#endif
    if (is_nan(earlier)) return earlier;
    return (is_nan(later) || later > earlier) ? later : earlier;
  }
};

template <class T>
struct Min {
  using value_type = T;
  static PP_HD T identity() { return highest_value<T>(); }
  static PP_HD T combine(const T& earlier, const T& later) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<T, float>) {  // (as Max's)
      float r;
      asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(earlier), "f"(later));
      return r;
    }
#endif
    if (is_nan(earlier)) return earlier;
    return (is_nan(later) || later < earlier) ? later : earlier;
  }
};

// log(exp(a) + exp(b)), stable; -inf is the identity and NaN propagates.
template <class T>
struct LogAddExp {
  using value_type = T;
  static PP_HD T identity() { return -std::numeric_limits<T>::infinity(); }
  static PP_HD T combine(const T& earlier, const T& later) {
    if (is_nan(earlier) || is_nan(later)) return earlier + later;
    const T hi = earlier > later ? earlier : later;
    const T lo = earlier > later ? later : earlier;
    if (lo == -std::numeric_limits<T>::infinity()) return hi;  // also covers -inf + -inf
    if (hi == std::numeric_limits<T>::infinity()) return hi;
    return hi + pp_log1p(pp_exp(lo - hi));
  }
};

// logaddexp again, for the GPU's scans: log(sum of exp(x_i)) held as the pair (max, rest), the
// largest term m and the sum of exp(x_i - m) over the other terms, standing for
// m + log1p(rest). Its combine is one exp (the smaller side's terms rescaled to the larger
// max), where LogAddExp's is an exp and a log1p behind its tests: the log1p is taken once per
// output instead, when a scan writes the pair (`result`; `lift` makes an element's pair). The
// rest is a sum of positive terms, which keeps float precision; leaving out the largest term
// (exactly 1) keeps log1p exact for outputs close to m. A NaN propagates and +inf absorbs, as
// in LogAddExp, without tests: the combine has no branch.
template <class T>
struct LogSumExp {
  struct value_type {
    T max;
    T rest;
  };
  static PP_HD value_type identity() { return {-std::numeric_limits<T>::infinity(), T(0)}; }
  static PP_HD value_type lift(T x) { return {x, T(0)}; }
  static PP_HD T result(const value_type& v) { return v.max + pp_log1p(v.rest); }
  static PP_HD value_type combine(const value_type& earlier, const value_type& later) {
    const bool earlier_larger = earlier.max >= later.max;  // (false with a NaN on either side)
    // (Copies, not references to the larger side: a reference chosen at run time put both
    // pairs in local memory, 3x slower scans.)
    const value_type hi = earlier_larger ? earlier : later;
    const value_type lo = earlier_larger ? later : earlier;
    // lo's terms rescaled to hi's largest: exp(-inf) = 0 drops the identity and any side below
    // +inf; equal infinities take exp(0) (their rest is then a count, and stays finite); a NaN
    // makes the rest NaN, and with it the result.
    const T gap = hi.max == lo.max ? T(0) : lo.max - hi.max;
    return {hi.max, hi.rest + pp_exp(gap) * (T(1) + lo.rest)};
  }
};

// How a problem turns an input element into a scanned value and a value into an output
// element: conversions, but for monoids whose values hold more than their result (LogSumExp).
template <class M>
struct ScanValues {
  using Value = typename M::value_type;
  template <class In>
  static PP_HD Value lift(const In& x) {
    return static_cast<Value>(x);
  }
  template <class Out>
  static PP_HD Out result(const Value& v) {
    return static_cast<Out>(v);
  }
};
template <class T>
struct ScanValues<LogSumExp<T>> {
  using Value = typename LogSumExp<T>::value_type;
  template <class In>
  static PP_HD Value lift(const In& x) {
    return LogSumExp<T>::lift(static_cast<T>(x));
  }
  template <class Out>
  static PP_HD Out result(const Value& v) {
    return static_cast<Out>(LogSumExp<T>::result(v));
  }
};

// Whether a monoid's combine runs special functions (exp, log) rather than one arithmetic
// instruction: kernel policies that trade threads for items per thread keep such scans on
// more threads.
template <class M>
inline constexpr bool kCostlyCombine = false;
template <class T>
inline constexpr bool kCostlyCombine<LogAddExp<T>> = true;
// (LogSumExp's one exp is not: its scans ran 9 % faster in the small blocks of the other
// 8-byte pairs than in 128-thread ones; H100, rows of 4096.)

// Whether a monoid's combine is one exp and a few arithmetic instructions (LogSumExp): block
// scans cost such scans more than cheap ones, and the row loop's threads take more items each
// to spread a block scan over.
template <class M>
inline constexpr bool kExpCombine = false;
template <class T>
inline constexpr bool kExpCombine<LogSumExp<T>> = true;

// A running sum with the number of elements in it: the mean of a (masked) reduction is the
// sum over the count, taken once at the end. The count is an integer so that it stays exact
// past 2^24 elements in a float32 reduction.
template <class T>
struct SumCount {
  struct value_type {
    T sum;
    int64_t count;
  };
  static PP_HD value_type identity() { return {T(0), int64_t(0)}; }
  static PP_HD value_type combine(const value_type& earlier, const value_type& later) {
    return {earlier.sum + later.sum, earlier.count + later.count};
  }
};

// ---- value-with-index monoids (the forward of max/min scans that autograd needs) -----------

// Keeps the position of the extreme value. Ties keep the earlier position, so that the
// gradient goes to the first of tied elements; a NaN is the extreme once it appears.
template <class T, bool kIsMax>
struct ArgExtreme {
  struct value_type {
    T value;
    int64_t index;
  };
  static PP_HD value_type identity() {
    return {kIsMax ? lowest_value<T>() : highest_value<T>(), int64_t(-1)};
  }
  static PP_HD value_type combine(const value_type& earlier, const value_type& later) {
    if (is_nan(earlier.value)) return earlier;
    if (is_nan(later.value)) return later;
    const bool take_later = kIsMax ? (later.value > earlier.value) : (later.value < earlier.value);
    // An identity on the left (index -1) yields to anything, so that ties with the identity
    // value (e.g. -inf) still report a real position.
    return (take_later || earlier.index < 0) ? later : earlier;
  }
};
template <class T>
using ArgMax = ArgExtreme<T, true>;
template <class T>
using ArgMin = ArgExtreme<T, false>;

// ---- the affine monoid: h -> a*h + b --------------------------------------------------------

// An element (a, b) is the map h -> a*h + b. Composing `earlier` then `later` gives
// h -> later.a*(earlier.a*h + earlier.b) + later.b. Not commutative.
template <class T>
struct Affine {
  struct value_type {
    T a;
    T b;
  };
  static PP_HD value_type identity() { return {T(1), T(0)}; }
  static PP_HD value_type combine(const value_type& earlier, const value_type& later) {
    return {later.a * earlier.a, later.a * earlier.b + later.b};
  }
};

// ---- the bicyclic monoid: an exact, non-commutative test operator -------------------------

// Elements are pairs (p, q) standing for the word ")^p (^q" with matched brackets cancelled.
// Integer-exact and non-commutative, so any operand-order bug changes the result exactly.
struct Bicyclic {
  struct value_type {
    int64_t p;
    int64_t q;
  };
  static PP_HD value_type identity() { return {0, 0}; }
  static PP_HD value_type combine(const value_type& earlier, const value_type& later) {
    const int64_t matched = earlier.q < later.p ? earlier.q : later.p;
    return {earlier.p + later.p - matched, earlier.q + later.q - matched};
  }
};

// ---- the segmented lift ---------------------------------------------------------------------

// Lifts any monoid M onto (head, value) pairs: a scan of the lifted monoid restarts at every
// element whose head flag is set. `head` of a combined range says whether a segment starts
// inside it, so a range with a head does not depend on anything before it.
template <class M>
struct Segmented {
  using inner_value = typename M::value_type;
  struct value_type {
    inner_value value;
    bool head;
  };
  static PP_HD value_type identity() { return {M::identity(), false}; }
  static PP_HD value_type combine(const value_type& earlier, const value_type& later) {
    if (later.head) return later;
    return {M::combine(earlier.value, later.value), earlier.head};
  }
};

}  // namespace parprims

namespace parprims {

// Complex numbers are recognised by their real()/imag() members (c10::complex, std::complex).
template <class T, class = void>
struct is_complex_like : std::false_type {};
template <class T>
struct is_complex_like<T, std::void_t<decltype(std::declval<T>().imag())>> : std::true_type {};

PP_HD float pp_cos(float x) { return ::cosf(x); }
PP_HD double pp_cos(double x) { return ::cos(x); }
PP_HD float pp_sin(float x) { return ::sinf(x); }
PP_HD double pp_sin(double x) { return ::sin(x); }

// exp for real and complex values (complex: e^re (cos im + i sin im)).
template <class T>
PP_HD T exp_any(const T& x) {
  if constexpr (is_complex_like<T>::value) {
    const auto m = pp_exp(x.real());
    return T(m * pp_cos(x.imag()), m * pp_sin(x.imag()));
  } else {
    return pp_exp(x);
  }
}

// ---- the dense affine monoid: h -> A h + b with a small D x D matrix A -----------------------

// Row-major A. Composing `earlier` then `later`: (later.A earlier.A, later.A earlier.b + later.b).
template <class T, int D>
struct MatrixAffine {
  struct value_type {
    T A[D * D];
    T b[D];
  };
  static PP_HD value_type identity() {
    value_type v;
    PP_UNROLL
    for (int i = 0; i < D; ++i) {
      v.b[i] = T(0);
      PP_UNROLL
      for (int j = 0; j < D; ++j) v.A[i * D + j] = T(i == j ? 1 : 0);
    }
    return v;
  }
  static PP_HD value_type combine(const value_type& earlier, const value_type& later) {
    value_type r;
    PP_UNROLL
    for (int i = 0; i < D; ++i) {
      T acc = later.b[i];
      PP_UNROLL
      for (int k = 0; k < D; ++k) acc += later.A[i * D + k] * earlier.b[k];
      r.b[i] = acc;
      PP_UNROLL
      for (int j = 0; j < D; ++j) {
        T s = T(0);
        PP_UNROLL
        for (int k = 0; k < D; ++k) s += later.A[i * D + k] * earlier.A[k * D + j];
        r.A[i * D + j] = s;
      }
    }
    return r;
  }
};

}  // namespace parprims
