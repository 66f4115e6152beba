// The CPU selective scan's vectorized exp (csrc/cpu/vector_exp.h) against double-precision exp:
// relative error over float's range, the edges (underflow to 0, overflow to inf, NaN), and
// arrays whose length is not a multiple of four.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "cpu/vector_exp.h"

namespace parprims::cpu {
namespace {

TEST(VectorExp, RelativeErrorBelowOneUlpOverTheNormalRange) {
  std::vector<float> x;
  for (float v = -87.0f; v <= 88.37f; v += 0.0137f) x.push_back(v);
  std::vector<float> e = x;
  exp_in_place(e.data(), static_cast<int64_t>(e.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::abs(e[i] - exact) / exact);
  }
  EXPECT_LT(worst, 1.2e-7) << "float's epsilon is 1.19e-7";
}

TEST(VectorExp, Edges) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  float x[] = {0.0f, -0.0f, 1.0f, -88.0f, -1e30f, -inf, 89.0f, inf, nan};
  exp_in_place(x, 9);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[1], 1.0f);
  EXPECT_NEAR(x[2], 2.718281828f, 3e-7f);
  EXPECT_EQ(x[3], 0.0f) << "below -87: 0, no subnormals";
  EXPECT_EQ(x[4], 0.0f);
  EXPECT_EQ(x[5], 0.0f);
  EXPECT_EQ(x[6], inf) << "past float's overflow";
  EXPECT_EQ(x[7], inf);
  EXPECT_TRUE(std::isnan(x[8]));
}

TEST(VectorExp, LengthsThatAreNotMultiplesOfFour) {
  for (int64_t n : {1, 2, 3, 5, 7, 16, 17}) {
    std::vector<float> x(n + 1, 0.5f);
    x[n] = 123.0f;  // past the end: must stay as it is
    exp_in_place(x.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(x[i], std::exp(0.5f), 2e-7f) << "n=" << n << " i=" << i;
    EXPECT_EQ(x[n], 123.0f) << "n=" << n;
  }
}

TEST(VectorExp, DoubleIsExact) {
  double x[] = {-3.0, 0.25, 10.0};
  exp_in_place(x, 3);
  EXPECT_EQ(x[0], std::exp(-3.0));
  EXPECT_EQ(x[1], std::exp(0.25));
  EXPECT_EQ(x[2], std::exp(10.0));
}

}  // namespace
}  // namespace parprims::cpu
