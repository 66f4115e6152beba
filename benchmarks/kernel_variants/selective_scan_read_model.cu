// A model of the selective-scan forward's global reads, to tell whether rows whose length is a
// power of two (all blocks reading the same offset of rows 8 KB apart at once) make the memory
// answer later. 768 blocks of 128 threads, as the forward at (8, 1536, L, 16): block b owns 16
// rows (channels) of batch b / 96; per chunk of 32 steps each thread loads the forward's items
// (2 pairs of u, delta and z from its rows, 2 pairs of B and C from the batch's 16 state rows,
// which the batch's 96 blocks share), stages them through shared memory, spins `work` cycles in
// place of the step loop, and stores 2 pairs of out. DEPTH chunks of loads are in flight.
// Inputs are zeros: only the times matter. Build and run on the GPU machine:
//
//   nvcc -O3 -arch=sm_90 benchmarks/kernel_variants/selective_scan_read_model.cu -o /tmp/read_model
//   for work in 0 6000 11000; do /tmp/read_model $work; done
//
// (benchmarks/NOTES.md, "The forward is bound by the L1's return of shared-memory words": at
// the forward's pace, about 11000 cycles a chunk, 2048 and 4096 ran within 1-3 % of 2040 and 4104.)
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
template <int DEPTH>
__global__ void __launch_bounds__(128, 6) walk(const float* u, const float* dl, const float* z, const float* B,
                                               const float* C, float* out, long len, int work) {
  const int b = blockIdx.x / 96, g = blockIdx.x % 96;
  const int t = threadIdx.x;
  // items: 16 rows x 16 pairs per chunk = 256 items, 2 rounds; row = item / 16, column = item % 16
  float2 ru[DEPTH][2], rd[DEPTH][2], rz[DEPTH][2], rB[DEPTH][2], rC[DEPTH][2];
  auto rowoff = [&](int r) { int item = t + r * 128; return ((long)b * 1536 + g * 16 + item / 16) * len + (item % 16) * 2; };
  auto soff = [&](int r) { int item = t + r * 128; return ((long)b * 16 + item % 16) * len + (item / 16) * 2; };
  auto fetch = [&](int s, long c0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      bool ok = c0 < len;
      ru[s][r] = ok ? *(const float2*)(u + rowoff(r) + c0) : float2{0, 0};
      rd[s][r] = ok ? *(const float2*)(dl + rowoff(r) + c0) : float2{0, 0};
      rz[s][r] = ok ? *(const float2*)(z + rowoff(r) + c0) : float2{0, 0};
      rB[s][r] = ok ? *(const float2*)(B + soff(r) + c0) : float2{0, 0};
      rC[s][r] = ok ? *(const float2*)(C + soff(r) + c0) : float2{0, 0};
    }
  };
#pragma unroll
  for (int s = 0; s < DEPTH; ++s) fetch(s, (long)s * 32);
  float acc = 0;
  __shared__ float sm[128 * 10];
  for (long c0 = 0; c0 < len; c0 += 32 * DEPTH) {
#pragma unroll
    for (int s = 0; s < DEPTH; ++s) {
      const long cc = c0 + s * 32;
      if (cc >= len) break;
      __syncthreads();
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        sm[t * 10 + r * 5 + 0] = ru[s][r].x + ru[s][r].y;
        sm[t * 10 + r * 5 + 1] = rd[s][r].x + rd[s][r].y;
        sm[t * 10 + r * 5 + 2] = rz[s][r].x + rz[s][r].y;
        sm[t * 10 + r * 5 + 3] = rB[s][r].x + rB[s][r].y;
        sm[t * 10 + r * 5 + 4] = rC[s][r].x + rC[s][r].y;
      }
      __syncthreads();
      fetch(s, cc + 32 * DEPTH);
      float x = sm[((t * 7) % 128) * 10 + (t % 10)];
      long start = clock64();
      while (clock64() - start < work) x = x * 0.999f + 1e-3f;
      acc += x;
#pragma unroll
      for (int r = 0; r < 2; ++r) *(float2*)(out + rowoff(r) + cc) = float2{acc, x};
    }
  }
}
int main(int argc, char** argv) {
  int work = argc > 1 ? atoi(argv[1]) : 10000;
  for (long len : {2040L, 2048L, 2056L, 4096L, 4104L}) {
    size_t n = 8L * 1536 * len, nb = 8L * 16 * len;
    float *u, *d, *z, *B, *C, *o;
    cudaMalloc(&u, n * 4); cudaMalloc(&d, n * 4); cudaMalloc(&z, n * 4); cudaMalloc(&o, n * 4);
    cudaMalloc(&B, nb * 4); cudaMalloc(&C, nb * 4);
    cudaMemset(u, 0, n * 4); cudaMemset(d, 0, n * 4); cudaMemset(z, 0, n * 4); cudaMemset(B, 0, nb * 4); cudaMemset(C, 0, nb * 4);
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    for (int depth : {1, 2}) {
      float best = 1e9;
      for (int rep = 0; rep < 7; ++rep) {
        cudaEventRecord(e0);
        if (depth == 1) walk<1><<<768, 128>>>(u, d, z, B, C, o, len, work);
        else walk<2><<<768, 128>>>(u, d, z, B, C, o, len, work);
        cudaEventRecord(e1); cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1); if (rep > 1 && ms < best) best = ms;
      }
      printf("len %5ld depth %d work %6d: %.4f ms, %.3f us per chunk (per 32 steps)\n", len, depth, work, best, best * 1000 / (len / 32.0));
    }
    cudaFree(u); cudaFree(d); cudaFree(z); cudaFree(o); cudaFree(B); cudaFree(C);
  }
  printf("%s\n", cudaGetErrorString(cudaGetLastError()));
}
