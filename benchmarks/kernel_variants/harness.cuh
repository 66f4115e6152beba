// What the stand-alone kernel harnesses share: error checks, timing, copies back to the host.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e = (x);                                                              \
    if (e != cudaSuccess) {                                                           \
      printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

namespace harness {

// Mean milliseconds of `run()` over `reps` runs after three warm-up runs.
template <class F>
float time_ms(F run, int reps) {
  for (int i = 0; i < 3; ++i) run();
  CK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  for (int i = 0; i < reps; ++i) run();
  cudaEventRecord(e1);
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / reps;
}

// n elements of type T at `d`, widened to double on the host.
template <class T>
std::vector<double> download(const void* d, int64_t n) {
  std::vector<T> tmp(n);
  CK(cudaMemcpy(tmp.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(static_cast<float>(tmp[i]));
  return out;
}

// The largest absolute difference relative to the largest reference value.
inline double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

}  // namespace harness
