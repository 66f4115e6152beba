// Stand-alone timing of the fused selective-scan forward and backward kernels, without the
// extension: the kernel units (csrc/cuda/selective_scan_{forward,backward}.cu of the tree given
// with -I) compile beside this file, so a variant of the kernels builds in about a minute
// instead of the extension's minutes (`variants.sh` builds several at once; set KERNELS=
// selective_scan there). Mamba's case: B and C of shape (batch, N, L), D, z, delta_bias and
// softplus on, inputs contiguous in time. Each run checks the forward's output and the
// backward's du and d(delta) on two channels against float64, and that two backward runs are
// bitwise equal; then it prints the kernels' times.
//
//   T=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 --expt-relaxed-constexpr \
//        -I$T/include -Icsrc benchmarks/kernel_variants/selective_scan_kernels.cu \
//        csrc/cuda/selective_scan_forward.cu csrc/cuda/selective_scan_backward.cu \
//        -L$T/lib -lc10_cuda -lc10 -Xlinker -rpath=$T/lib -o selective_scan_kernels
//   ./selective_scan_kernels f32|bf16 [batch dim len [sequences]]   (default (8, 1536, 2048), N = 16)
//
// With `sequences` > 0 (batch 1), the row holds that many packed sequences whose lengths grow
// geometrically tenfold from the first to the last (cu_seqlens, as bench_selective_scan.py's
// packed row); shapes that the launch cuts into time segments (few long rows, packed rows) are
// timed and checked in the forward only.
#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/selective_scan.h"
#include "cuda/selective_scan/launch.h"
#include "harness.cuh"

using namespace parprims;
using namespace parprims::cuda;
using harness::download;
using harness::relative_error;
using harness::time_ms;

namespace {

constexpr int64_t kStates = 16;
constexpr int kCheckedChannels = 2;

// Device memory that lives as long as the harness (the extension's is PyTorch's allocator).
class Arena : public Workspace {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    CK(cudaMalloc(&p, bytes > 0 ? bytes : 1));
    blocks_.push_back(p);
    return p;
  }
  ~Arena() {
    for (void* p : blocks_) cudaFree(p);
  }

 private:
  std::vector<void*> blocks_;
};

uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  return x;
}
// Host values in [lo, hi), the same on every run.
std::vector<float> uniform(int64_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * static_cast<float>(mix(i * 0x9E3779B97F4A7C15ull + seed) >> 40) / 16777216.f;
  return v;
}

// A device copy in type T, and the host values as T rounds them.
template <class T>
T* upload(Arena& arena, std::vector<float>& values) {
  std::vector<T> cast(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    cast[i] = static_cast<T>(values[i]);
    values[i] = static_cast<float>(cast[i]);
  }
  T* d = static_cast<T*>(arena.allocate(values.size() * sizeof(T)));
  CK(cudaMemcpy(d, cast.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct Inputs {
  int64_t batch, dim, len;
  std::vector<float> u, delta, z, B, C, A, D, bias, dout;
  std::vector<int64_t> starts;  // packed sequences' first steps (empty: one sequence a row)
};

// `count` sequence lengths summing to `len`, growing geometrically tenfold (each at least 1).
std::vector<int64_t> packed_offsets(int64_t len, int64_t count) {
  std::vector<double> weight(count);
  double total = 0;
  for (int64_t k = 0; k < count; ++k) total += weight[k] = std::pow(10.0, count > 1 ? double(k) / (count - 1) : 0.0);
  std::vector<int64_t> offsets{0};
  for (int64_t k = 0; k + 1 < count; ++k) {
    const int64_t want = std::max<int64_t>(1, static_cast<int64_t>(len * weight[k] / total));
    offsets.push_back(std::min(offsets.back() + want, len - (count - 1 - k)));
  }
  offsets.push_back(len);
  return offsets;
}

// float64 forward and backward of channel d of batch 0: out, du and d(delta) along time.
void reference(const Inputs& x, int64_t d, std::vector<double>& out, std::vector<double>& du,
               std::vector<double>& ddelta) {
  const int64_t L = x.len, N = kStates;
  auto at = [&](const std::vector<float>& v, int64_t t) { return static_cast<double>(v[d * L + t]); };
  auto bc = [&](const std::vector<float>& v, int64_t n, int64_t t) { return static_cast<double>(v[n * L + t]); };
  std::vector<double> dt(L), h((L + 1) * N, 0.0);
  for (int64_t t = 0; t < L; ++t) dt[t] = softplus(at(x.delta, t) + x.bias[d]);
  out.assign(L, 0);
  for (int64_t t = 0; t < L; ++t) {
    if (std::find(x.starts.begin(), x.starts.end(), t) != x.starts.end()) {  // a sequence starts: from zero
      for (int64_t n = 0; n < N; ++n) h[t * N + n] = 0;
    }
    double y = x.D[d] * at(x.u, t);
    for (int64_t n = 0; n < N; ++n) {
      const double a = std::exp(dt[t] * x.A[d * N + n]);
      h[(t + 1) * N + n] = a * h[t * N + n] + dt[t] * bc(x.B, n, t) * at(x.u, t);
      y += bc(x.C, n, t) * h[(t + 1) * N + n];
    }
    const double z = at(x.z, t);
    out[t] = y * z * sigmoid(z);
  }
  du.assign(L, 0);
  ddelta.assign(L, 0);
  std::vector<double> dh(N, 0.0);
  for (int64_t t = L - 1; t >= 0; --t) {
    const double z = at(x.z, t), gate = z * sigmoid(z), dy = at(x.dout, t) * gate;
    double ddt = 0;
    du[t] = x.D[d] * dy;
    for (int64_t n = 0; n < N; ++n) {
      dh[n] += bc(x.C, n, t) * dy;  // the gradient reaching h_t
      const double A = x.A[d * N + n], a = std::exp(dt[t] * A);
      du[t] += dh[n] * dt[t] * bc(x.B, n, t);
      ddt += dh[n] * (A * a * h[t * N + n] + bc(x.B, n, t) * at(x.u, t));
      dh[n] *= a;  // to h_{t-1}
    }
    ddelta[t] = ddt * sigmoid(at(x.delta, t) + x.bias[d]);
  }
}

template <class In>
void run(c10::ScalarType dtype, const char* name, int64_t batch, int64_t dim, int64_t len, int64_t sequences) {
  Arena arena;
  const int64_t N = kStates, n = batch * dim * len;
  Inputs x{batch, dim, len};
  x.u = uniform(n, 1, -1, 1);
  x.delta = uniform(n, 2, -3, 0);
  x.z = uniform(n, 3, -2, 2);
  x.dout = uniform(n, 4, -1, 1);
  x.B = uniform(batch * N * len, 5, -1, 1);
  x.C = uniform(batch * N * len, 6, -1, 1);
  x.A = uniform(dim * N, 7, -4, -0.25f);
  x.D = uniform(dim, 8, 0, 1);
  x.bias = uniform(dim, 9, -1, 1);

  SelectiveScanParams p;
  p.batch = batch;
  p.dim = dim;
  p.len = len;
  p.dstate = N;
  p.dim_per_group = dim;
  const SeqTensor seq{nullptr, dim * len, len, 1};
  p.u = p.delta = p.z = p.out = seq;
  p.u.data = upload<In>(arena, x.u);
  p.delta.data = upload<In>(arena, x.delta);
  p.z.data = upload<In>(arena, x.z);
  p.out.data = arena.allocate(n * sizeof(In));
  for (StateInput* s : {&p.B, &p.C}) {
    s->variable = true;
    s->batch_stride = s->group_stride = N * len;
    s->state_stride = len;
    s->len_stride = 1;
  }
  p.B.data = upload<In>(arena, x.B);
  p.C.data = upload<In>(arena, x.C);
  p.A = upload<float>(arena, x.A);
  p.D = upload<float>(arena, x.D);
  p.delta_bias = upload<float>(arena, x.bias);
  p.delta_softplus = true;
  std::vector<int64_t> offsets;
  if (sequences > 0) {
    offsets = packed_offsets(len, sequences);
    x.starts.assign(offsets.begin() + 1, offsets.end() - 1);
    auto* device_offsets = static_cast<int64_t*>(arena.allocate(offsets.size() * sizeof(int64_t)));
    CK(cudaMemcpy(device_offsets, offsets.data(), offsets.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
    p.offsets = device_offsets;
    p.num_seqs = sequences;
  }
  p.last_state = arena.allocate((sequences > 0 ? sequences : batch) * dim * N * sizeof(float));
  p.checkpoint_chunks = (len + kSelectiveScanCheckpointEvery - 1) / kSelectiveScanCheckpointEvery;
  p.checkpoints = arena.allocate(batch * dim * p.checkpoint_chunks * N * sizeof(float));

  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  LaunchContext ctx{nullptr, sms, &arena};
  const SelectiveScanShape fwd = selective_scan_forward_shape(p, dtype, ctx);
  if (fwd.state_tiles > 1) {
    printf("this harness times shapes of one state tile\n");
    exit(1);
  }
  const float fwd_ms = time_ms([&] { launch_selective_scan_forward(p, fwd, dtype, ctx); }, 20);
  if (sequences > 0 || fwd.segments > 1) {  // the forward alone
    const auto out = download<In>(p.out.data, dim * len);
    double out_err = 0;
    for (int64_t d = 0; d < kCheckedChannels; ++d) {
      std::vector<double> ref_out, ref_du, ref_ddelta;
      reference(x, d, ref_out, ref_du, ref_ddelta);
      out_err = std::max(out_err, relative_error(std::vector<double>(out.begin() + d * len, out.begin() + (d + 1) * len),
                                                 ref_out));
    }
    printf("selective_scan %-4s (%lld, %lld, %lld, %lld)  %lld sequences  %lld time segments  fwd %.4f ms  rel_err out %.1e\n",
           name, (long long)batch, (long long)dim, (long long)len, (long long)N, (long long)(sequences > 0 ? sequences : 1),
           (long long)fwd.segments, fwd_ms, out_err);
    return;
  }

  SelectiveScanGrads g;
  SeqTensor dout = seq;
  dout.data = upload<In>(arena, x.dout);
  g.dout = dout;
  for (void** t : {&g.du, &g.ddelta, &g.dz}) *t = arena.allocate(n * sizeof(In));
  const SelectiveScanShape bwd = selective_scan_backward_shape(p, dtype, ctx);
  g.channel_block = bwd.channels_per_block;
  const int64_t rows = bwd.segments * batch, blocks = (dim + bwd.channels_per_block - 1) / bwd.channels_per_block;
  g.dA_partial = arena.allocate(rows * dim * N * sizeof(float));
  g.dD_partial = arena.allocate(rows * dim * sizeof(float));
  g.ddelta_bias_partial = arena.allocate(rows * dim * sizeof(float));
  g.dB_partial = arena.allocate(blocks * batch * N * len * sizeof(float));
  g.dC_partial = arena.allocate(blocks * batch * N * len * sizeof(float));
  const float bwd_ms = time_ms([&] { launch_selective_scan_backward(p, g, bwd, dtype, ctx); }, 20);
  const auto du_first = download<In>(g.du, n);
  launch_selective_scan_backward(p, g, bwd, dtype, ctx);
  const bool deterministic = download<In>(g.du, n) == du_first;

  const auto out = download<In>(p.out.data, dim * len), du = download<In>(g.du, dim * len),
             ddelta = download<In>(g.ddelta, dim * len);
  double out_err = 0, du_err = 0, ddelta_err = 0;
  for (int64_t d = 0; d < kCheckedChannels; ++d) {
    std::vector<double> ref_out, ref_du, ref_ddelta;
    reference(x, d, ref_out, ref_du, ref_ddelta);
    auto row = [&](const std::vector<double>& v) { return std::vector<double>(v.begin() + d * len, v.begin() + (d + 1) * len); };
    out_err = std::max(out_err, relative_error(row(out), ref_out));
    du_err = std::max(du_err, relative_error(row(du), ref_du));
    ddelta_err = std::max(ddelta_err, relative_error(row(ddelta), ref_ddelta));
  }
  printf("selective_scan %-4s (%lld, %lld, %lld, %lld)  fwd %.4f ms  bwd %.4f ms  fwd+bwd %.4f ms  "
         "rel_err out %.1e du %.1e ddelta %.1e  %s\n",
         name, (long long)batch, (long long)dim, (long long)len, (long long)N, fwd_ms, bwd_ms, fwd_ms + bwd_ms, out_err,
         du_err, ddelta_err, deterministic ? "deterministic" : "NOT DETERMINISTIC");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    printf("usage: %s f32|bf16 [batch dim len [sequences]]\n", argv[0]);
    return 2;
  }
  const int64_t batch = argc > 2 ? atoll(argv[2]) : 8, dim = argc > 3 ? atoll(argv[3]) : 1536,
                len = argc > 4 ? atoll(argv[4]) : 2048, sequences = argc > 5 ? atoll(argv[5]) : 0;
  if (sequences > 0 && (batch != 1 || sequences > len)) {
    printf("packed sequences need batch 1 and at most len sequences\n");
    return 2;
  }
  if (strcmp(argv[1], "bf16") == 0) {
    run<c10::BFloat16>(c10::kBFloat16, "bf16", batch, dim, len, sequences);
  } else {
    run<float>(c10::kFloat, "f32", batch, dim, len, sequences);
  }
  return 0;
}
