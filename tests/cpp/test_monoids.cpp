// Monoid laws for every operator of csrc/core/monoids.h: identity on both sides and
// associativity, exact for the integer ones; NaN propagation for max/min/logaddexp (and the
// GPU's (max, rest) pairs of logaddexp); tie and NaN rules of ArgMax/ArgMin;
// non-commutativity where the algebra has it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "core/monoids.h"

namespace parprims {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Exact equality in which NaN equals NaN (a propagated NaN is the expected result).
bool same(double x, double y) { return (std::isnan(x) && std::isnan(y)) || x == y; }
bool same(float x, float y) { return (std::isnan(x) && std::isnan(y)) || x == y; }
bool same(int64_t x, int64_t y) { return x == y; }
bool same(int32_t x, int32_t y) { return x == y; }
bool same(bool x, bool y) { return x == y; }

template <class M, class Eq>
void expect_identity(const std::vector<typename M::value_type>& samples, Eq eq) {
  const auto e = M::identity();
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_TRUE(eq(M::combine(e, samples[i]), samples[i])) << "identity on the left, sample " << i;
    EXPECT_TRUE(eq(M::combine(samples[i], e), samples[i])) << "identity on the right, sample " << i;
  }
  EXPECT_TRUE(eq(M::combine(e, e), e)) << "identity with itself";
}

template <class M, class Eq>
void expect_associative(const std::vector<typename M::value_type>& samples, Eq eq) {
  for (size_t i = 0; i < samples.size(); ++i) {
    for (size_t j = 0; j < samples.size(); ++j) {
      for (size_t k = 0; k < samples.size(); ++k) {
        const auto &x = samples[i], &y = samples[j], &z = samples[k];
        const auto left = M::combine(M::combine(x, y), z);
        const auto right = M::combine(x, M::combine(y, z));
        EXPECT_TRUE(eq(left, right)) << "(x y) z != x (y z) for samples " << i << ", " << j << ", " << k;
      }
    }
  }
}

template <class M>
void expect_laws_exact(const std::vector<typename M::value_type>& samples) {
  auto eq = [](const auto& a, const auto& b) { return same(a, b); };
  expect_identity<M>(samples, eq);
  expect_associative<M>(samples, eq);
}

// ---- Add, Mul -----------------------------------------------------------------------------

TEST(Add, LawsInt64) { expect_laws_exact<Add<int64_t>>({0, 1, -7, 42, int64_t(1) << 40, -(int64_t(1) << 35)}); }
TEST(Add, LawsInt32) { expect_laws_exact<Add<int32_t>>({0, 1, -7, 42, 1 << 20}); }
// Integer-valued doubles add exactly.
TEST(Add, LawsDoubleExactValues) { expect_laws_exact<Add<double>>({0.0, 1.0, -3.0, 1024.0, 0.5, -0.25}); }
TEST(Add, NaNAndInfinityPropagate) {
  EXPECT_TRUE(std::isnan(Add<double>::combine(kNaN, 1.0)));
  EXPECT_TRUE(std::isnan(Add<double>::combine(1.0, kNaN)));
  EXPECT_EQ(Add<double>::combine(kInf, 1.0), kInf);
  EXPECT_EQ(Add<double>::identity(), 0.0);
}

TEST(Mul, LawsInt64) { expect_laws_exact<Mul<int64_t>>({0, 1, -1, 2, 3, -5, 7}); }
// Powers of two multiply exactly.
TEST(Mul, LawsDoubleExactValues) { expect_laws_exact<Mul<double>>({1.0, -1.0, 2.0, 0.5, -0.25, 0.0, 8.0}); }
TEST(Mul, Identity) {
  EXPECT_EQ(Mul<double>::identity(), 1.0);
  EXPECT_EQ(Mul<int64_t>::identity(), 1);
}

// ---- Max, Min -----------------------------------------------------------------------------

TEST(Max, LawsInt64) {
  expect_laws_exact<Max<int64_t>>({0, -1, 5, std::numeric_limits<int64_t>::lowest(),
                                   std::numeric_limits<int64_t>::max(), 5});
  EXPECT_EQ(Max<int64_t>::identity(), std::numeric_limits<int64_t>::lowest());
}
TEST(Max, LawsInt32) {
  expect_laws_exact<Max<int32_t>>({0, -1, 5, std::numeric_limits<int32_t>::lowest()});
  EXPECT_EQ(Max<int32_t>::identity(), std::numeric_limits<int32_t>::lowest());
}
TEST(Max, LawsBool) {
  expect_laws_exact<Max<bool>>({false, true});
  EXPECT_EQ(Max<bool>::identity(), false);
}
// NaN included: the laws hold with NaN == NaN, since a NaN anywhere makes the result NaN.
TEST(Max, LawsDoubleWithNaNAndInfinities) {
  expect_laws_exact<Max<double>>({0.0, -1.5, 3.0, kInf, -kInf, kNaN, -0.0});
  EXPECT_EQ(Max<double>::identity(), -kInf);
}
TEST(Max, NaNPropagatesFromEitherSide) {
  EXPECT_TRUE(std::isnan(Max<double>::combine(kNaN, kInf)));
  EXPECT_TRUE(std::isnan(Max<double>::combine(kInf, kNaN)));
  EXPECT_TRUE(std::isnan(Max<float>::combine(1.0f, std::nanf(""))));
  EXPECT_TRUE(std::isnan(Max<double>::combine(Max<double>::identity(), kNaN)));
}

TEST(Min, LawsInt64) {
  expect_laws_exact<Min<int64_t>>({0, -1, 5, std::numeric_limits<int64_t>::lowest(),
                                   std::numeric_limits<int64_t>::max()});
  EXPECT_EQ(Min<int64_t>::identity(), std::numeric_limits<int64_t>::max());
}
TEST(Min, LawsBool) {
  expect_laws_exact<Min<bool>>({false, true});
  EXPECT_EQ(Min<bool>::identity(), true);
}
TEST(Min, LawsDoubleWithNaNAndInfinities) {
  expect_laws_exact<Min<double>>({0.0, -1.5, 3.0, kInf, -kInf, kNaN});
  EXPECT_EQ(Min<double>::identity(), kInf);
}
TEST(Min, NaNPropagatesFromEitherSide) {
  EXPECT_TRUE(std::isnan(Min<double>::combine(kNaN, -kInf)));
  EXPECT_TRUE(std::isnan(Min<double>::combine(-kInf, kNaN)));
  EXPECT_TRUE(std::isnan(Min<float>::combine(std::nanf(""), 1.0f)));
}

// ---- LogAddExp ----------------------------------------------------------------------------

TEST(LogAddExp, IdentityIsExact) {
  EXPECT_EQ(LogAddExp<double>::identity(), -kInf);
  expect_identity<LogAddExp<double>>({0.0, -3.0, 7.25, kInf, -kInf, kNaN},
                                     [](double a, double b) { return same(a, b); });
}
TEST(LogAddExp, Associative) {
  const std::vector<double> samples{0.0, -3.0, 7.25, -100.0, 50.0, -kInf, kInf};
  expect_associative<LogAddExp<double>>(samples, [](double a, double b) {
    if (std::isinf(a) || std::isinf(b)) return a == b;
    return std::abs(a - b) <= 1e-12 * std::max(1.0, std::abs(a));
  });
}
TEST(LogAddExp, Values) {
  EXPECT_NEAR(LogAddExp<double>::combine(0.0, 0.0), std::log(2.0), 1e-15);
  EXPECT_NEAR(LogAddExp<double>::combine(1.0, 2.0), std::log(std::exp(1.0) + std::exp(2.0)), 1e-14);
  // Stable where exp overflows.
  EXPECT_NEAR(LogAddExp<double>::combine(1000.0, 1000.0), 1000.0 + std::log(2.0), 1e-12);
  EXPECT_NEAR(LogAddExp<float>::combine(-200.0f, -200.0f), -200.0f + std::log(2.0f), 1e-4);
  EXPECT_EQ(LogAddExp<double>::combine(-kInf, -kInf), -kInf);
  EXPECT_EQ(LogAddExp<double>::combine(kInf, 3.0), kInf);
  EXPECT_EQ(LogAddExp<double>::combine(kInf, kInf), kInf);
}
TEST(LogAddExp, NaNPropagates) {
  EXPECT_TRUE(std::isnan(LogAddExp<double>::combine(kNaN, 1.0)));
  EXPECT_TRUE(std::isnan(LogAddExp<double>::combine(1.0, kNaN)));
  EXPECT_TRUE(std::isnan(LogAddExp<double>::combine(-kInf, kNaN)));
  EXPECT_TRUE(std::isnan(LogAddExp<double>::combine(kNaN, kInf)));
}

// ---- LogSumExp (logaddexp as (max, rest) pairs) ------------------------------------------

using Pair = LogSumExp<double>::value_type;
Pair pair_of(double x) { return LogSumExp<double>::lift(x); }
double result_of(const Pair& p) { return LogSumExp<double>::result(p); }
double logaddexp_of(const std::vector<double>& xs) {
  double r = -kInf;
  for (double x : xs) r = LogAddExp<double>::combine(r, x);
  return r;
}

// Pairs compare by the value they stand for (two pairs can stand for one value: (m, rest) from
// different orders of the same terms round differently).
bool same_result(const Pair& a, const Pair& b) {
  const double x = result_of(a), y = result_of(b);
  if (std::isnan(x) || std::isnan(y) || std::isinf(x) || std::isinf(y)) return same(x, y);
  return std::abs(x - y) <= 1e-13 * std::max(1.0, std::abs(x));
}

std::vector<Pair> pair_samples() {
  std::vector<Pair> samples;
  for (double x : {0.0, -3.0, 7.25, -100.0, 50.0, -kInf, kInf, kNaN}) samples.push_back(pair_of(x));
  // Sums of several terms: (m, rest) with rest > 0.
  samples.push_back(LogSumExp<double>::combine(pair_of(2.0), pair_of(1.5)));
  samples.push_back(LogSumExp<double>::combine(pair_of(-700.0), pair_of(-699.0)));
  return samples;
}

TEST(LogSumExp, Identity) {
  EXPECT_TRUE(same(result_of(LogSumExp<double>::identity()), -kInf));
  expect_identity<LogSumExp<double>>(pair_samples(), same_result);
}
TEST(LogSumExp, Associative) { expect_associative<LogSumExp<double>>(pair_samples(), same_result); }
// Every order of combining stands for logaddexp of all the terms, in its precision.
TEST(LogSumExp, AgreesWithLogAddExp) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 30.0);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> xs(1 + trial % 17);
    for (double& x : xs) x = normal(rng);
    Pair left = LogSumExp<double>::identity(), right = LogSumExp<double>::identity();
    for (size_t i = 0; i < xs.size(); ++i) {
      left = LogSumExp<double>::combine(left, pair_of(xs[i]));
      right = LogSumExp<double>::combine(pair_of(xs[xs.size() - 1 - i]), right);
    }
    const double want = logaddexp_of(xs);
    EXPECT_NEAR(result_of(left), want, 1e-13 * std::max(1.0, std::abs(want)));
    EXPECT_NEAR(result_of(right), want, 1e-13 * std::max(1.0, std::abs(want)));
  }
  // Exact near the largest term: log1p of the other terms alone.
  const Pair p = LogSumExp<double>::combine(pair_of(0.0), pair_of(-40.0));
  EXPECT_EQ(p.max, 0.0);
  EXPECT_DOUBLE_EQ(result_of(p), std::log1p(std::exp(-40.0)));
  // Stable where exp overflows; float rounding as LogAddExp's.
  EXPECT_NEAR(result_of(LogSumExp<double>::combine(pair_of(1000.0), pair_of(1000.0))), 1000.0 + std::log(2.0), 1e-12);
  const auto f = LogSumExp<float>::combine(LogSumExp<float>::lift(-200.0f), LogSumExp<float>::lift(-200.0f));
  EXPECT_NEAR(LogSumExp<float>::result(f), -200.0f + std::log(2.0f), 1e-4);
}
TEST(LogSumExp, InfinitiesAndNaN) {
  using M = LogSumExp<double>;
  EXPECT_EQ(result_of(M::combine(pair_of(-kInf), pair_of(-kInf))), -kInf);
  EXPECT_EQ(result_of(M::combine(pair_of(kInf), pair_of(3.0))), kInf);
  EXPECT_EQ(result_of(M::combine(pair_of(3.0), pair_of(kInf))), kInf);
  EXPECT_EQ(result_of(M::combine(pair_of(kInf), pair_of(kInf))), kInf);
  for (double other : {1.0, -kInf, kInf}) {
    EXPECT_TRUE(std::isnan(result_of(M::combine(pair_of(kNaN), pair_of(other))))) << other;
    EXPECT_TRUE(std::isnan(result_of(M::combine(pair_of(other), pair_of(kNaN))))) << other;
  }
}

// ---- SumCount (the mean's pairs) -------------------------------------------------------------

TEST(SumCount, LawsExactValues) {
  using M = SumCount<double>;
  const std::vector<M::value_type> samples{{0.0, 0}, {1.0, 1}, {-3.0, 2}, {1024.0, 7}, {0.5, 1}, {-0.25, 3}};
  auto eq = [](const M::value_type& a, const M::value_type& b) { return same(a.sum, b.sum) && a.count == b.count; };
  expect_identity<M>(samples, eq);
  expect_associative<M>(samples, eq);
}

TEST(SumCount, CountStaysExactPastFloatPrecision) {
  using M = SumCount<float>;
  M::value_type acc = M::identity();
  const M::value_type one{1.0f, 1};
  for (int i = 0; i < (1 << 24) + 3; ++i) acc = M::combine(acc, one);
  EXPECT_EQ(acc.count, (int64_t(1) << 24) + 3);  // a float count would stop at 2^24
}

// ---- ArgMax, ArgMin -----------------------------------------------------------------------

template <class M>
bool same_arg(const typename M::value_type& a, const typename M::value_type& b) {
  return same(a.value, b.value) && a.index == b.index;
}

TEST(ArgMax, Laws) {
  using M = ArgMax<double>;
  // Ties of value 3 and of -inf (the identity's value) at several positions, and a NaN.
  const std::vector<M::value_type> samples{{3.0, 0}, {1.0, 1}, {3.0, 2}, {-kInf, 3}, {5.0, 4},
                                           {-kInf, 5}, {kNaN, 6}, {3.0, 7}};
  expect_identity<M>(samples, same_arg<M>);
  // Associativity over elements in position order (as a scan combines them).
  for (size_t i = 0; i < samples.size(); ++i)
    for (size_t j = i; j < samples.size(); ++j)
      for (size_t k = j; k < samples.size(); ++k) {
        const auto &x = samples[i], &y = samples[j], &z = samples[k];
        EXPECT_TRUE(same_arg<M>(M::combine(M::combine(x, y), z), M::combine(x, M::combine(y, z))))
            << i << " " << j << " " << k;
      }
}
TEST(ArgMax, TiesKeepTheEarlierPosition) {
  using M = ArgMax<double>;
  EXPECT_EQ(M::combine({3.0, 0}, {3.0, 2}).index, 0);
  EXPECT_EQ(M::combine({3.0, 0}, {4.0, 2}).index, 2);
  EXPECT_EQ(M::combine({3.0, 5}, {1.0, 6}).index, 5);
  // A tie with the identity's value still reports a real position.
  EXPECT_EQ(M::combine(M::identity(), {-kInf, 3}).index, 3);
  EXPECT_EQ(M::combine({-kInf, 3}, {-kInf, 4}).index, 3);
  EXPECT_EQ(M::identity().index, -1);
}
TEST(ArgMax, FirstNaNWins) {
  using M = ArgMax<double>;
  const auto r = M::combine(M::combine({1.0, 0}, {kNaN, 1}), {kNaN, 2});
  EXPECT_TRUE(std::isnan(r.value));
  EXPECT_EQ(r.index, 1);
  EXPECT_EQ(M::combine({kNaN, 1}, {kInf, 2}).index, 1);
}
TEST(ArgMax, Int64ExactTies) {
  using M = ArgMax<int64_t>;
  const int64_t lo = std::numeric_limits<int64_t>::lowest();
  const std::vector<M::value_type> samples{{2, 0}, {2, 1}, {lo, 2}, {9, 3}, {2, 4}};
  expect_identity<M>(samples, same_arg<M>);
  EXPECT_EQ(M::combine({2, 0}, {2, 1}).index, 0);
  EXPECT_EQ(M::combine(M::identity(), {lo, 2}).index, 2);
}

TEST(ArgMin, Laws) {
  using M = ArgMin<double>;
  const std::vector<M::value_type> samples{{3.0, 0}, {1.0, 1}, {1.0, 2}, {kInf, 3}, {-5.0, 4},
                                           {kInf, 5}, {kNaN, 6}, {-5.0, 7}};
  expect_identity<M>(samples, same_arg<M>);
  for (size_t i = 0; i < samples.size(); ++i)
    for (size_t j = i; j < samples.size(); ++j)
      for (size_t k = j; k < samples.size(); ++k) {
        const auto &x = samples[i], &y = samples[j], &z = samples[k];
        EXPECT_TRUE(same_arg<M>(M::combine(M::combine(x, y), z), M::combine(x, M::combine(y, z))))
            << i << " " << j << " " << k;
      }
}
TEST(ArgMin, TiesKeepTheEarlierPosition) {
  using M = ArgMin<double>;
  EXPECT_EQ(M::combine({1.0, 1}, {1.0, 2}).index, 1);
  EXPECT_EQ(M::combine({1.0, 1}, {0.5, 2}).index, 2);
  EXPECT_EQ(M::combine(M::identity(), {kInf, 3}).index, 3);
  EXPECT_EQ(M::identity().value, kInf);
  const auto r = M::combine({-kInf, 0}, {kNaN, 1});
  EXPECT_TRUE(std::isnan(r.value));
  EXPECT_EQ(r.index, 1);
}

// ---- Affine -------------------------------------------------------------------------------

template <class T>
bool same_affine(const typename Affine<T>::value_type& x, const typename Affine<T>::value_type& y) {
  return same(x.a, y.a) && same(x.b, y.b);
}

TEST(Affine, LawsInt64Exact) {
  using M = Affine<int64_t>;
  const std::vector<M::value_type> samples{{1, 0}, {2, 3}, {-1, 5}, {0, 7}, {3, -2}, {-2, -1}};
  expect_identity<M>(samples, same_affine<int64_t>);
  expect_associative<M>(samples, same_affine<int64_t>);
}
TEST(Affine, LawsDoubleExactValues) {
  using M = Affine<double>;
  const std::vector<M::value_type> samples{{1.0, 0.0}, {0.5, 3.0}, {-1.0, 0.25}, {2.0, -4.0}, {0.0, 1.0}};
  expect_identity<M>(samples, same_affine<double>);
  expect_associative<M>(samples, same_affine<double>);
}
TEST(Affine, ComposesEarlierThenLater) {
  using M = Affine<int64_t>;
  const M::value_type earlier{2, 3}, later{5, 7};
  const int64_t h = 11;
  const auto c = M::combine(earlier, later);
  EXPECT_EQ(c.a * h + c.b, later.a * (earlier.a * h + earlier.b) + later.b);
  const auto swapped = M::combine(later, earlier);
  EXPECT_FALSE(same_affine<int64_t>(c, swapped)) << "the affine monoid is not commutative";
}

// ---- MatrixAffine -------------------------------------------------------------------------

template <int D>
using MA = MatrixAffine<int64_t, D>;

template <int D>
bool same_matrix(const typename MA<D>::value_type& x, const typename MA<D>::value_type& y) {
  for (int i = 0; i < D * D; ++i)
    if (x.A[i] != y.A[i]) return false;
  for (int i = 0; i < D; ++i)
    if (x.b[i] != y.b[i]) return false;
  return true;
}

template <int D>
std::vector<typename MA<D>::value_type> matrix_samples(int count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(-3, 3);
  std::vector<typename MA<D>::value_type> out(count);
  for (auto& v : out) {
    for (int i = 0; i < D * D; ++i) v.A[i] = dist(rng);
    for (int i = 0; i < D; ++i) v.b[i] = dist(rng);
  }
  return out;
}

TEST(MatrixAffine, LawsD2Exact) {
  const auto samples = matrix_samples<2>(7, 1);
  expect_identity<MA<2>>(samples, same_matrix<2>);
  expect_associative<MA<2>>(samples, same_matrix<2>);
}
TEST(MatrixAffine, LawsD3Exact) {
  const auto samples = matrix_samples<3>(6, 2);
  expect_identity<MA<3>>(samples, same_matrix<3>);
  expect_associative<MA<3>>(samples, same_matrix<3>);
}
TEST(MatrixAffine, ComposesEarlierThenLaterAndIsNotCommutative) {
  using M = MA<2>;
  const M::value_type earlier{{1, 2, 0, 1}, {3, -1}}, later{{0, 1, 1, 0}, {5, 7}};
  const auto c = M::combine(earlier, later);
  const int64_t h[2] = {2, -3};
  int64_t mid[2], want[2];
  for (int i = 0; i < 2; ++i) mid[i] = earlier.A[i * 2] * h[0] + earlier.A[i * 2 + 1] * h[1] + earlier.b[i];
  for (int i = 0; i < 2; ++i) want[i] = later.A[i * 2] * mid[0] + later.A[i * 2 + 1] * mid[1] + later.b[i];
  for (int i = 0; i < 2; ++i) EXPECT_EQ(c.A[i * 2] * h[0] + c.A[i * 2 + 1] * h[1] + c.b[i], want[i]);
  EXPECT_FALSE(same_matrix<2>(c, M::combine(later, earlier)));
}
// The scalar case agrees with Affine.
TEST(MatrixAffine, D1MatchesAffine) {
  using M1 = MatrixAffine<int64_t, 1>;
  const M1::value_type x{{3}, {4}}, y{{-2}, {5}};
  const auto m = M1::combine(x, y);
  const auto s = Affine<int64_t>::combine({3, 4}, {-2, 5});
  EXPECT_EQ(m.A[0], s.a);
  EXPECT_EQ(m.b[0], s.b);
}

// ---- Bicyclic -----------------------------------------------------------------------------

bool same_bicyclic(const Bicyclic::value_type& x, const Bicyclic::value_type& y) {
  return x.p == y.p && x.q == y.q;
}

TEST(Bicyclic, LawsExact) {
  std::vector<Bicyclic::value_type> samples;
  for (int64_t p = 0; p <= 3; ++p)
    for (int64_t q = 0; q <= 3; ++q) samples.push_back({p, q});
  expect_identity<Bicyclic>(samples, same_bicyclic);
  expect_associative<Bicyclic>(samples, same_bicyclic);
}
TEST(Bicyclic, CancelsMatchedBrackets) {
  // "((" then "))" cancels; "))" then "((" does not.
  EXPECT_TRUE(same_bicyclic(Bicyclic::combine({0, 2}, {2, 0}), {0, 0}));
  EXPECT_TRUE(same_bicyclic(Bicyclic::combine({2, 0}, {0, 2}), {2, 2}));
  EXPECT_TRUE(same_bicyclic(Bicyclic::combine({1, 3}, {2, 1}), {1, 2}));
}

// ---- Segmented<M> -------------------------------------------------------------------------

template <class M, class Eq>
void expect_segmented_laws(const std::vector<typename M::value_type>& values, Eq eq) {
  using S = Segmented<M>;
  std::vector<typename S::value_type> samples;
  for (const auto& v : values) {
    samples.push_back({v, false});
    samples.push_back({v, true});
  }
  auto seq = [&](const typename S::value_type& x, const typename S::value_type& y) {
    return x.head == y.head && eq(x.value, y.value);
  };
  expect_identity<S>(samples, seq);
  expect_associative<S>(samples, seq);
}

TEST(Segmented, LawsOverBicyclic) {
  expect_segmented_laws<Bicyclic>({{0, 0}, {1, 0}, {0, 2}, {2, 1}, {1, 3}}, same_bicyclic);
}
TEST(Segmented, LawsOverAddInt64) {
  expect_segmented_laws<Add<int64_t>>({0, 1, -4, 9}, [](int64_t a, int64_t b) { return a == b; });
}
TEST(Segmented, LawsOverMaxWithNaN) {
  expect_segmented_laws<Max<double>>({0.0, 2.0, -kInf, kNaN}, [](double a, double b) { return same(a, b); });
}
TEST(Segmented, LawsOverAffine) {
  expect_segmented_laws<Affine<int64_t>>({{1, 0}, {2, 3}, {-1, 5}, {0, 2}}, same_affine<int64_t>);
}
TEST(Segmented, HeadRestarts) {
  using S = Segmented<Add<int64_t>>;
  const auto r = S::combine(S::combine({5, true}, {3, false}), {7, true});
  EXPECT_EQ(r.value, 7);
  EXPECT_TRUE(r.head);
  const auto q = S::combine({5, false}, {3, false});
  EXPECT_EQ(q.value, 8);
  EXPECT_FALSE(q.head);
  // A head on the left survives: the combined range contains a segment start.
  EXPECT_TRUE(S::combine({5, true}, {3, false}).head);
}

}  // namespace
}  // namespace parprims
