// Stand-alone timing of the engine's affine-recurrence kernels, without the extension: the
// row loop's forward and backward on time-contiguous rows, and the column kernel's forward and
// backward along the T of a (B, T, D) tensor; and, for comparison, the row loop's add, max and logaddexp
// scans. It includes the engine's headers from the source tree given with -I (<tree>/csrc), so a variant of a kernel (a policy constant, a problem's load)
// builds in about ten seconds instead of the extension's minutes; `variants.sh` beside it
// builds and runs several trees at once. Each run checks its outputs on a few rows (the
// backward against float64, the forward against a sequential float32 loop) and prints the
// time, GB/s and the copy bandwidth measured in the same process.
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 --expt-relaxed-constexpr \
//        -I"$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')/include" \
//        -Icsrc benchmarks/kernel_variants/affine_kernels.cu -o affine_kernels
//   ./affine_kernels row-fwd|row-grad|col-fwd|col-grad|row-sum|row-max|row-lse f32|bf16 log_gates(0|1) [reps]
//
// Shapes: rows (8, 2048, 4096) (16384 rows of 4096 steps); columns (8, 4096, 2048) along T.
// Knobs for measuring how the rows fall on the blocks: LEN=L cuts the same
// elements into rows of L steps (a divisor of 2^26), ROWS=R runs the first R rows only (e.g. a
// whole number of the resident blocks' rounds), and ONE_ROW_BLOCKS=1 (0) launches a block a row
// (the resident blocks, walking rows in turn) whatever the tree's rule (RowScan::grid); the
// column modes take ONE_ROW_BLOCKS=1 as a block a group of 32 rows.
#include <c10/util/BFloat16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/affine_problems.h"
#include "cuda/engine/column_scan.cuh"
#include "cuda/engine/row_scan.cuh"
#include "harness.cuh"

namespace parprims {
template <class T>
struct LogSumExp;  // (declared for trees without it: see LogAddExpScan)
}

using namespace parprims;
using namespace parprims::cuda;
using harness::download;
using harness::relative_error;
using harness::time_ms;

namespace {

constexpr int64_t kBatch = 8, kChannels = 2048, kSteps = 4096;
constexpr int64_t kCheckedRows = 64;

__device__ float hash_unit(uint64_t i, uint32_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return static_cast<float>(x >> 40) / static_cast<float>(1ull << 24);
}

template <class T>
__global__ void fill(T* p, int64_t n, uint32_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<T>(lo + (hi - lo) * hash_unit(i, seed));
}

// h of every row, one thread a row: row r starts at (r / inner) * len * inner + r % inner and
// steps by `inner` (1: rows contiguous in time; D: the T of a (B, T, D) tensor).
template <class T>
__global__ void forward_simple(const T* a, const T* b, T* h, int64_t rows, int64_t len, int64_t inner, bool log_gates) {
  const int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (r >= rows) return;
  const int64_t base = (r / inner) * len * inner + r % inner;
  float s = 0.f;
  for (int64_t t = 0; t < len; ++t) {
    float g = static_cast<float>(a[base + t * inner]);
    if (log_gates) g = expf(g);
    s = g * s + static_cast<float>(b[base + t * inner]);
    h[base + t * inner] = static_cast<T>(s);
  }
}

int sm_count() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

// Device arrays of one case: gates a, inputs b (grad_h for the backward), h, the two
// gradients and a per-row state.
template <class T>
struct Arrays {
  int64_t n = 0;
  T *a = nullptr, *b = nullptr, *h = nullptr, *ga = nullptr, *gb = nullptr;
  float* state = nullptr;
  Arrays(int64_t elements, int64_t rows) : n(elements) {
    for (T** p : {&a, &b, &h, &ga, &gb}) CK(cudaMalloc(p, n * sizeof(T)));
    CK(cudaMalloc(&state, rows * sizeof(float)));
  }
  ~Arrays() {
    for (T* p : {a, b, h, ga, gb}) cudaFree(p);
    cudaFree(state);
  }
  // Gates in (0.9, 1) (log gates in (-0.1, 0)), inputs in (-1, 1); for the backward, h from
  // those and b refilled as the incoming gradient.
  void make(bool log_gates, bool backward, int64_t rows, int64_t len, int64_t inner) {
    fill<<<1024, 256>>>(a, n, 1, log_gates ? -0.1f : 0.9f, log_gates ? 0.0f : 1.0f);
    fill<<<1024, 256>>>(b, n, 2, -1.f, 1.f);
    if (backward) {
      forward_simple<<<(rows + 127) / 128, 128>>>(a, b, h, rows, len, inner, log_gates);
      fill<<<1024, 256>>>(b, n, 3, -1.f, 1.f);
    }
    CK(cudaMemset(ga, 0xff, n * sizeof(T)));  // poison
    CK(cudaMemset(gb, 0xff, n * sizeof(T)));
    CK(cudaDeviceSynchronize());
  }
};

// The largest error of the backward on the first kCheckedRows rows against float64, relative
// to the largest reference value (row r at element r * row_stride, steps `inner` apart).
template <class T>
double check_backward(const Arrays<T>& x, int64_t len, int64_t inner, bool log_gates) {
  const int64_t span = inner == 1 ? kCheckedRows * len : len * inner;  // the checked rows' elements
  auto A = download<T>(x.a, span), G = download<T>(x.b, span), H = download<T>(x.h, span);
  auto GA = download<T>(x.ga, span), GB = download<T>(x.gb, span);
  double err = 0, scale = 0;
  for (int64_t r = 0; r < kCheckedRows; ++r) {
    const int64_t base = inner == 1 ? r * len : r;
    double lam = 0;
    for (int64_t t = len - 1; t >= 0; --t) {
      const int64_t i = base + t * inner;
      double next_gate = t + 1 < len ? A[i + inner] : 0.0;
      if (log_gates && t + 1 < len) next_gate = std::exp(next_gate);
      lam = G[i] + next_gate * lam;
      double da = lam * (t > 0 ? H[i - inner] : 0.0);
      if (log_gates) da *= std::exp(A[i]);
      err = std::max({err, std::fabs(GB[i] - lam), std::fabs(GA[i] - da)});
      scale = std::max({scale, std::fabs(lam), std::fabs(da)});
    }
  }
  return err / scale;
}

enum class ScanKind { kAdd, kMax, kLogAddExp };

double combine(ScanKind kind, double acc, double x) {
  switch (kind) {
    case ScanKind::kMax: return std::max(acc, x);
    case ScanKind::kLogAddExp: {
      const double hi = std::max(acc, x), lo = std::min(acc, x);
      return lo == -INFINITY ? hi : hi + std::log1p(std::exp(lo - hi));
    }
    default: return acc + x;
  }
}

// The largest error of the scan of b into h on the first kCheckedRows rows against float64,
// relative to the largest reference value.
template <class T>
double check_scan(const Arrays<T>& x, int64_t len, ScanKind kind) {
  const auto B = download<T>(x.b, kCheckedRows * len), H = download<T>(x.h, kCheckedRows * len);
  std::vector<double> want(B.size());
  for (int64_t r = 0; r < kCheckedRows; ++r) {
    double acc = kind == ScanKind::kAdd ? 0.0 : -INFINITY;
    for (int64_t t = 0; t < len; ++t) {
      acc = combine(kind, acc, B[r * len + t]);
      want[r * len + t] = acc;
    }
  }
  return relative_error(H, want);
}

RowIndexer rows_of(int64_t outer, int64_t len, int64_t inner) {
  RowIndexer r;
  r.ndim = inner == 1 ? 1 : 2;
  r.sizes[0] = outer;
  r.strides[0] = len * inner;
  if (inner > 1) {
    r.sizes[1] = inner;
    r.strides[1] = 1;
  }
  r.stride_len = inner;
  return r;
}

template <class T>
AffineGradProblem<T, float, float> grad_problem(const Arrays<T>& x, int64_t rows, int64_t len, int64_t outer,
                                                int64_t inner, bool log_gates) {
  AffineGradProblem<T, float, float> p;
  p.a = x.a;
  p.grad_h = x.b;
  p.h = x.h;
  p.grad_a = x.ga;
  p.grad_b = x.gb;
  p.grad_initial = x.state;
  p.rows = rows;
  p.len = len;
  p.log_gates = log_gates;
  p.a_rows = p.grad_h_rows = p.h_rows = p.grad_a_rows = p.grad_b_rows = rows_of(outer, len, inner);
  return p;
}

// Whether a tree's RowScan picks its own grid (RowScan::grid; older trees launch the resident blocks).
template <class K, class = void>
struct HasGridRule : std::false_type {};
template <class K>
struct HasGridRule<K, std::void_t<decltype(K::grid(int64_t{0}, int64_t{0}, true))>> : std::true_type {};

// The row loop over whole rows (the engine's launch for rows that fill the GPU).
template <class P>
float time_rows(const P& p, const ScanGeometry& g, int reps, int& per_sm) {
  using K = RowScan<P, false>;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, row_scan_kernel<P, false>, K::kThreads, 0));
  const int64_t resident = int64_t{per_sm} * sm_count();
  const char* knob = getenv("ONE_ROW_BLOCKS");
  unsigned grid = static_cast<unsigned>(g.rows < resident ? g.rows : resident);
  if constexpr (HasGridRule<K>::value) grid = K::grid(g.rows, resident, true);  // the engine's rule, in trees that have it
  if (knob != nullptr) grid = static_cast<unsigned>(atoi(knob) == 1 || g.rows < resident ? g.rows : resident);
  SpanPlan plan;
  plan.length = g.len;
  return time_ms([&] { row_scan_kernel<P, false><<<grid, K::kThreads>>>(p, g, true, plan, false); }, reps);
}

// The rows the row-loop modes time: ROWS if set (at most all of them).
int64_t timed_rows(int64_t rows) {
  const char* env = getenv("ROWS");
  const int64_t r = env == nullptr ? rows : atoll(env);
  return r > 0 && r < rows ? r : rows;
}

// The column kernel over whole rows (the engine's launch when the groups of 32 rows fill the GPU);
// ONE_ROW_BLOCKS=1 launches a block a group of rows instead of the resident blocks.
template <class P>
float time_columns(const P& p, const ScanGeometry& g, int reps, int& per_sm) {
  using K = ColumnScan<P>;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, column_scan_kernel<P>, K::kThreads, 0));
  const int64_t resident = int64_t{per_sm} * sm_count();
  ColumnPlan plan;
  plan.groups = (g.rows + K::kColumns - 1) / K::kColumns;
  plan.spans = plan_spans(plan.groups, g.len, K::kTileLength, resident);
  if (plan.spans.count != 1) {
    printf("the rows are cut into %lld spans: not handled here\n", static_cast<long long>(plan.spans.count));
    exit(1);
  }
  const char* knob = getenv("ONE_ROW_BLOCKS");
  const bool one_each = knob != nullptr && atoi(knob) == 1;
  const unsigned grid = static_cast<unsigned>(plan.groups < resident || one_each ? plan.groups : resident);
  return time_ms([&] { column_scan_kernel<P><<<grid, K::kThreads>>>(p, g, plan, false); }, reps);
}

// The monoid of the CUDA engine's logaddexp scans: the (max, rest) pairs where the source tree
// has them (older trees, which the variants may be, scan LogAddExp).
template <class T, class = void>
struct is_complete : std::false_type {};
template <class T>
struct is_complete<T, std::void_t<decltype(sizeof(T))>> : std::true_type {};
using LogAddExpScan = std::conditional_t<is_complete<LogSumExp<float>>::value, LogSumExp<float>, LogAddExp<float>>;

// A scan of b into h, row by row.
template <class M, class T>
float time_scan(const Arrays<T>& x, const ScanGeometry& g, int64_t outer, int64_t inner, int reps, int& per_sm) {
  ScanProblem<M, T, T> p;
  p.in = x.b;
  p.out = x.h;
  p.in_rows = p.out_rows = rows_of(outer, g.len, inner);
  return time_rows(p, g, reps, per_sm);
}

template <class T>
void run(const char* mode, bool log_gates, int reps, const char* dtype) {
  const bool columns = strncmp(mode, "col-", 4) == 0;
  const ScanKind kind = strcmp(mode, "row-max") == 0   ? ScanKind::kMax
                        : strcmp(mode, "row-lse") == 0 ? ScanKind::kLogAddExp
                                                       : ScanKind::kAdd;
  const bool scan = kind != ScanKind::kAdd || strcmp(mode, "row-sum") == 0;
  const bool backward = !scan && strcmp(mode, "row-fwd") != 0 && strcmp(mode, "col-fwd") != 0;
  const int64_t n = kBatch * kChannels * kSteps;
  const int64_t len = columns || getenv("LEN") == nullptr ? kSteps : atoll(getenv("LEN"));
  const int64_t rows = columns ? kBatch * kChannels : n / len;
  const int64_t outer = columns ? kBatch : rows, inner = columns ? kChannels : 1;
  Arrays<T> x(n, rows);
  x.make(log_gates, backward, rows, len, inner);
  const float copy_ms = time_ms([&] { cudaMemcpy(x.ga, x.b, n * sizeof(T), cudaMemcpyDeviceToDevice); }, 20);
  ScanGeometry g;
  g.rows = columns ? rows : timed_rows(rows);
  g.len = len;
  g.reverse = backward;  // the backward scans against the forward's direction
  int per_sm = 0;
  float ms = 0;
  double err = 0;
  if (scan) {
    ms = kind == ScanKind::kMax         ? time_scan<Max<float>>(x, g, outer, inner, reps, per_sm)
         : kind == ScanKind::kLogAddExp ? time_scan<LogAddExpScan>(x, g, outer, inner, reps, per_sm)
                                        : time_scan<Add<float>>(x, g, outer, inner, reps, per_sm);
    err = check_scan(x, len, kind);
  } else if (!backward) {
    AffineProblem<T, float, float> p;
    p.a = x.a;
    p.b = x.b;
    p.h = x.h;
    p.final_state = x.state;
    p.rows = rows;
    p.log_gates = log_gates;
    p.a_rows = p.b_rows = p.h_rows = rows_of(outer, len, inner);
    ms = columns ? time_columns(p, g, reps, per_sm) : time_rows(p, g, reps, per_sm);
    // The first kCheckedRows rows (columns: of the first batch, whose span is len * inner).
    const int64_t span = columns ? len * inner : kCheckedRows * len;
    T* reference;
    CK(cudaMalloc(&reference, span * sizeof(T)));
    CK(cudaMemset(reference, 0, span * sizeof(T)));
    forward_simple<<<1, kCheckedRows>>>(x.a, x.b, reference, kCheckedRows, len, inner, log_gates);
    auto got = download<T>(x.h, span), want = download<T>(reference, span);
    if (columns) {  // only the checked rows' elements: the first kCheckedRows of every step
      decltype(got) g2, w2;
      for (int64_t t = 0; t < len; ++t)
        for (int64_t r = 0; r < kCheckedRows; ++r) g2.push_back(got[t * inner + r]), w2.push_back(want[t * inner + r]);
      got.swap(g2), want.swap(w2);
    }
    err = relative_error(got, want);
    cudaFree(reference);
  } else if (!columns) {
    ms = time_rows(grad_problem(x, rows, len, outer, inner, log_gates), g, reps, per_sm);
    err = check_backward(x, len, inner, log_gates);
  } else {
    ms = time_columns(grad_problem(x, rows, len, outer, inner, log_gates), g, reps, per_sm);
    err = check_backward(x, len, inner, log_gates);
  }
  const double bytes = (scan ? 2.0 : backward ? 5.0 : 3.0) * g.rows * len * sizeof(T);
  const double copy_gbps = 2.0 * n * sizeof(T) / copy_ms / 1e6;
  printf("%-8s %-4s log=%d rows=%-5lld blocks/SM=%-2d %.4f ms  %5.0f GB/s  %.3f of copy (%4.0f GB/s)  rel_err %.2e\n", mode, dtype,
         int(log_gates), static_cast<long long>(g.rows), per_sm, ms, bytes / ms / 1e6, bytes / ms / 1e6 / copy_gbps, copy_gbps, err);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    printf("usage: %s row-fwd|row-grad|col-fwd|col-grad|row-sum|row-max|row-lse f32|bf16 log_gates(0|1) [reps]\n", argv[0]);
    return 2;
  }
  const bool bf16 = strcmp(argv[2], "bf16") == 0;
  const bool log_gates = atoi(argv[3]) != 0;
  const int reps = argc > 4 ? atoi(argv[4]) : 50;
  if (bf16) {
    run<c10::BFloat16>(argv[1], log_gates, reps, "bf16");
  } else {
    run<float>(argv[1], log_gates, reps, "f32");
  }
  return 0;
}
