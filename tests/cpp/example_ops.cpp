// A LibTorch program that uses torch_parprims through <parprims/ops.h> and checks the results
// against ATen (at::cumsum, at::cummax, ...) and plain loops. Linking the parprims library
// registers the ops; nothing else is loaded. Exits nonzero on any mismatch.
#include <ATen/ATen.h>
#include <parprims/ops.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

int failures = 0;
int checks = 0;

void expect(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
  }
}

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what,
                  double rtol = 1e-5, double atol = 1e-6) {
  const bool ok = got.sizes() == want.sizes() && got.scalar_type() == want.scalar_type() &&
                  at::allclose(got, want, rtol, atol, /*equal_nan=*/true);
  if (!ok) {
    std::fprintf(stderr, "got (%s):\n%s\nwant (%s):\n%s\n", c10::toString(got.scalar_type()),
                 got.toString().c_str(), c10::toString(want.scalar_type()), want.toString().c_str());
  }
  expect(ok, what);
}

template <class F>
void expect_throws(F&& f, const std::string& needle, const std::string& what) {
  try {
    f();
  } catch (const c10::Error& e) {
    const std::string msg = e.what();
    expect(msg.find(needle) != std::string::npos, what + ": message mentions '" + needle + "'");
    return;
  }
  expect(false, what + ": no exception");
}

at::Tensor exclusive_from_inclusive(const at::Tensor& inclusive, int64_t dim, double identity) {
  auto first = at::full_like(inclusive.narrow(dim, 0, 1), identity);
  return at::cat({first, inclusive.narrow(dim, 0, inclusive.size(dim) - 1)}, dim);
}

void scans() {
  const auto x = at::randn({4, 37}, at::kDouble);
  expect_close(parprims::scan(x, 1), at::cumsum(x, 1), "scan add");
  expect_close(parprims::scan(x, 0, "add"), at::cumsum(x, 0), "scan add dim 0");
  expect_close(parprims::scan(x, -1, "mul"), at::cumprod(x, -1), "scan mul");
  expect_close(parprims::scan(x, 1, "max"), std::get<0>(at::cummax(x, 1)), "scan max");
  expect_close(parprims::scan(x, 1, "min"), std::get<0>(at::cummin(x, 1)), "scan min");
  expect_close(parprims::scan(x, 1, "logaddexp"), at::logcumsumexp(x, 1), "scan logaddexp");
  expect_close(parprims::scan(x, 1, "add", /*exclusive=*/true),
               exclusive_from_inclusive(at::cumsum(x, 1), 1, 0.0), "scan add exclusive");
  expect_close(parprims::scan(x, 1, "max", true),
               exclusive_from_inclusive(std::get<0>(at::cummax(x, 1)), 1, -INFINITY), "scan max exclusive");
  expect_close(parprims::scan(x, 1, "add", false, /*reverse=*/true), at::cumsum(x.flip(1), 1).flip(1),
               "scan add reverse");

  // A non-contiguous view is read in place.
  const auto xt = at::randn({37, 4}, at::kFloat).t();
  expect_close(parprims::scan(xt, 1), at::cumsum(xt, 1), "scan add on a transposed view", 1e-4, 1e-5);

  // Integer add gives int64, as at::cumsum does; max keeps the dtype.
  const auto xi = at::randint(-50, 50, {3, 100}, at::kInt);
  const auto yi = parprims::scan(xi, 1);
  expect(yi.scalar_type() == at::kLong, "scan add over int32 gives int64");
  expect(at::equal(yi, at::cumsum(xi, 1, at::kLong)), "scan add int32 exact");
  expect(at::equal(parprims::scan(xi, 1, "max"), std::get<0>(at::cummax(xi, 1))), "scan max int32 exact");

  // NaN propagates through max, as at::cummax.
  auto xn = at::randn({10}, at::kFloat);
  xn[4] = NAN;
  const auto yn = parprims::scan(xn, 0, "max");
  expect(!at::isnan(yn.narrow(0, 0, 4)).any().item<bool>() && at::isnan(yn.narrow(0, 4, 6)).all().item<bool>(),
         "scan max propagates NaN");

  // A long row (the chunked parallel path).
  const auto xl = at::randint(-3, 4, {1, 200003}, at::kLong);
  expect(at::equal(parprims::scan(xl, 1), at::cumsum(xl, 1)), "scan add long row exact");
}

void segmented_scans() {
  const auto offsets = at::tensor(std::vector<int64_t>{0, 3, 3, 10, 25}, at::kLong);
  const auto x = at::randn({25, 6}, at::kDouble);
  for (std::string op : {"add", "max", "logaddexp"}) {
    const auto y = parprims::segmented_scan(x, offsets, 0, op);
    std::vector<at::Tensor> parts;
    for (int64_t k = 0; k + 1 < offsets.size(0); ++k) {
      const int64_t s = offsets[k].item<int64_t>(), e = offsets[k + 1].item<int64_t>();
      parts.push_back(parprims::scan(x.narrow(0, s, e - s), 0, op));
    }
    expect_close(y, at::cat(parts, 0), "segmented_scan " + op + " equals per-sequence scans");
  }
  // int32 offsets, exclusive, reverse.
  const auto o32 = offsets.to(at::kInt);
  const auto y = parprims::segmented_scan(x, o32, 0, "add", /*exclusive=*/true, /*reverse=*/true);
  std::vector<at::Tensor> parts;
  for (int64_t k = 0; k + 1 < o32.size(0); ++k) {
    const int64_t s = o32[k].item<int>(), e = o32[k + 1].item<int>();
    const auto seg = x.narrow(0, s, e - s);
    parts.push_back(at::cumsum(seg.flip(0), 0).flip(0) - seg);
  }
  expect_close(y, at::cat(parts, 0), "segmented_scan exclusive reverse with int32 offsets");
}

void affine_scans() {
  // h_t = a_t h_{t-1} + b_t along the last dim of (B, C, T).
  const int64_t B = 2, C = 3, T = 50;
  const auto a = at::rand({B, C, T}, at::kDouble);
  const auto b = at::randn({B, C, T}, at::kDouble);
  const auto h0 = at::randn({B, C}, at::kDouble);
  const auto [h, last] = parprims::affine_scan(a, b, -1, h0);
  auto want = at::empty_like(b);
  auto state = h0.clone();
  for (int64_t t = 0; t < T; ++t) {
    state = a.select(-1, t) * state + b.select(-1, t);
    want.select(-1, t).copy_(state);
  }
  expect_close(h, want, "affine_scan with an initial state");
  expect_close(last, state, "affine_scan final state");

  // Packed sequences along dim 0 of (total, C), one initial state per sequence.
  const auto offsets = at::tensor(std::vector<int64_t>{0, 4, 4, 9}, at::kLong);
  const auto ap = at::rand({9, C}, at::kDouble), bp = at::randn({9, C}, at::kDouble);
  const auto init = at::randn({3, C}, at::kDouble);
  const auto [hp, fp] = parprims::affine_scan(ap, bp, 0, init, offsets);
  auto want_p = at::empty_like(bp);
  auto want_f = init.clone();  // an empty sequence passes its initial state through
  for (int64_t k = 0; k < 3; ++k) {
    auto s = init[k].clone();
    for (int64_t t = offsets[k].item<int64_t>(); t < offsets[k + 1].item<int64_t>(); ++t) {
      s = ap[t] * s + bp[t];
      want_p[t].copy_(s);
    }
    want_f[k].copy_(s);
  }
  expect_close(hp, want_p, "affine_scan over packed sequences");
  expect_close(fp, want_f, "affine_scan final states per sequence");

  // Matrix form: A (B, T, d, d), b (B, T, d); dim indexes b (any dim but the last, state one).
  const int64_t d = 3;
  const auto A = 0.5 * at::randn({B, T, d, d}, at::kDouble);
  const auto bm = at::randn({B, T, d}, at::kDouble);
  const auto [hm, fm] = parprims::matrix_affine_scan(A, bm, /*dim=*/1);
  auto want_m = at::empty_like(bm);
  auto s = at::zeros({B, d}, at::kDouble);
  for (int64_t t = 0; t < T; ++t) {
    s = at::matmul(A.select(1, t), s.unsqueeze(-1)).squeeze(-1) + bm.select(1, t);
    want_m.select(1, t).copy_(s);
  }
  expect_close(hm, want_m, "matrix_affine_scan", 1e-8, 1e-8);
  expect_close(fm, s, "matrix_affine_scan final state", 1e-8, 1e-8);
}

void reductions() {
  const auto x = at::randn({7, 3}, at::kDouble);
  const auto offsets = at::tensor(std::vector<int64_t>{0, 3, 3, 7}, at::kLong);
  const auto sums = parprims::segment_reduce(x, offsets, "sum");
  const auto want = at::stack({x.slice(0, 0, 3).sum(0), at::zeros({3}, at::kDouble), x.slice(0, 3, 7).sum(0)});
  expect_close(sums, want, "segment_reduce sum (an empty sequence gives 0)", 1e-12, 1e-12);
  expect_close(parprims::segment_reduce(x, offsets, "max").select(0, 2), std::get<0>(x.slice(0, 3, 7).max(0)),
               "segment_reduce max");
  const auto mask = x > 0;
  expect_close(parprims::reduce(x, 0, "sum", mask), (x * mask).sum(0), "masked reduce sum", 1e-12, 1e-12);
  expect_close(parprims::reduce(x, 1, "logsumexp", std::nullopt, /*keepdim=*/true), at::logsumexp(x, {1}, true),
               "reduce logsumexp keepdim", 1e-12, 1e-12);
  const auto values = at::tensor(std::vector<float>{0.0f, 0.2f, 0.5f, 1.0f, 1.5f, NAN});
  const auto counts = parprims::histogram(values, 2, 0.0, 1.0);
  expect(counts.scalar_type() == at::kLong && counts[0].item<int64_t>() == 2 && counts[1].item<int64_t>() == 2,
         "histogram counts (1.0 in the last bin; outside and NaN skipped)");
  expect_throws([] { parprims::reduce(at::ones({5}), 0, "median"); }, "median", "reduce rejects an unknown op");
}

void offsets_checks() {
  parprims::check_offsets(at::tensor(std::vector<int64_t>{0, 3, 3, 7}, at::kLong), 7);
  parprims::check_offsets(at::tensor(std::vector<int32_t>{0, 7}, at::kInt), 7);
  expect(true, "check_offsets accepts valid offsets");
  expect_throws([] { parprims::check_offsets(at::tensor(std::vector<int64_t>{0, 5, 3, 7}, at::kLong), 7); },
                "offsets", "check_offsets rejects decreasing offsets");
  expect_throws([] { parprims::check_offsets(at::tensor(std::vector<int64_t>{0, 3, 6}, at::kLong), 7); },
                "offsets", "check_offsets rejects a wrong total");
  expect_throws([] { parprims::check_offsets(at::tensor(std::vector<double>{0, 7}, at::kDouble), 7); },
                "offsets", "check_offsets rejects a float dtype");
  expect_throws(
      [] {
        parprims::segmented_scan(at::ones({5}), at::tensor(std::vector<int64_t>{0, 9}, at::kLong), 0);
      },
      "offsets", "segmented_scan validates offsets on CPU");
  expect_throws([] { parprims::scan(at::ones({5}), 0, "median"); }, "median", "scan rejects an unknown op");

  const bool before = parprims::checks_enabled();
  parprims::set_checks(true);
  expect(parprims::checks_enabled(), "set_checks(true)");
  parprims::set_checks(false);
  expect(!parprims::checks_enabled(), "set_checks(false)");
  parprims::set_checks(before);
}

}  // namespace

int main() {
  at::manual_seed(0);
  try {
    scans();
    segmented_scans();
    affine_scans();
    reductions();
    offsets_checks();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: unexpected exception: %s\n", e.what());
    return 1;
  }
  std::printf("example_ops: %d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
