// The selective scan (Mamba-1) as the CPU and CUDA kernels see it: plain pointers, sizes and
// strides, and the few formulas both devices share. Torch-free.
//
// For every (batch b, channel d, state n) and time t:
//   delta_t = softplus(delta_raw_t + delta_bias[d])      (softplus only when delta_softplus)
//   h_t     = exp(delta_t * A[d, n]) * h_{t-1} + delta_t * B_t[n] * u_t
//   y_t     = sum_n C_t[n] * h_t + D[d] * u_t
//   out_t   = y_t * silu(z_t)                              (when z is given)
// With packed sequences (batch 1), h restarts from the sequence's initial state (or zero) at
// every sequence start.
#pragma once

#include <cmath>

#include "monoids.h"

namespace parprims {

// The forward saves the state entering every kSelectiveScanCheckpointEvery-th step (when the
// backward will run); the backward recomputes the states between two such checkpoints.
constexpr int kSelectiveScanCheckpointEvery = 16;

// A strided (batch, dim, L) tensor: u, delta, z, out and their gradients.
struct SeqTensor {
  const void* data = nullptr;
  int64_t batch_stride = 0, dim_stride = 0, len_stride = 0;
  PP_HD int64_t offset(int64_t b, int64_t d, int64_t t) const {
    return b * batch_stride + d * dim_stride + t * len_stride;
  }
};

// B or C: constant (dim, N) or variable (batch, G, N, L) (a 3-D (batch, N, L) is G = 1). One
// indexing formula covers both: unused strides are zero.
struct StateInput {
  const void* data = nullptr;
  bool variable = false;
  int64_t batch_stride = 0, group_stride = 0, dim_stride = 0, state_stride = 0, len_stride = 0;
  PP_HD int64_t offset(int64_t b, int64_t group, int64_t d, int64_t n, int64_t t) const {
    return b * batch_stride + group * group_stride + d * dim_stride + n * state_stride + t * len_stride;
  }
};

struct SelectiveScanParams {
  int64_t batch = 0, dim = 0, len = 0, dstate = 0;
  int64_t groups = 1;         // groups of variable B/C; channel d belongs to d / dim_per_group
  int64_t dim_per_group = 1;  // dim / groups
  SeqTensor u, delta, z, out;
  StateInput B, C;
  const void* A = nullptr;           // (dim, N) contiguous, compute type
  const void* D = nullptr;           // (dim,) compute type, or nullptr
  const void* delta_bias = nullptr;  // (dim,) compute type, or nullptr
  bool delta_softplus = false;
  // States (compute type, contiguous): (batch or S, dim, N).
  const void* initial_state = nullptr;  // nullptr: zeros
  void* last_state = nullptr;
  // Packed sequences along L (batch == 1): sequence k covers [offsets[k], offsets[k+1]).
  const void* offsets = nullptr;
  bool offsets_int64 = true;
  int64_t offsets_stride = 1;  // offsets may be a strided view
  int64_t num_seqs = 1;
  // The CUDA forward saves the state at every chunk start for the backward (nullptr: it does
  // not): (batch, dim, chunks, N) in the compute type.
  void* checkpoints = nullptr;
  int64_t checkpoint_chunks = 0;

  PP_HD int64_t group_of(int64_t d) const { return d / dim_per_group; }
  PP_HD int64_t seq_offset(int64_t k) const {
    return offsets_int64 ? static_cast<const int64_t*>(offsets)[k * offsets_stride]
                         : static_cast<int64_t>(static_cast<const int32_t*>(offsets)[k * offsets_stride]);
  }
};

// Gradients of the backward, beside the forward's params. Parameter gradients are written as
// per-task partial sums (summed afterwards in a fixed order, so runs are bitwise identical):
// A, D, delta_bias and constant B/C per batch row (and time segment, on CUDA: rows =
// segments * batch); variable B/C per block of channels.
struct SelectiveScanGrads {
  SeqTensor dout;                      // (batch, dim, L) incoming gradient of out
  const void* dlast_state = nullptr;   // (batch or S, dim, N) compute type, or nullptr
  void* du = nullptr;                  // (batch, dim, L) contiguous, input dtype
  void* ddelta = nullptr;              // (batch, dim, L) contiguous, input dtype
  void* dz = nullptr;                  // (batch, dim, L) contiguous, input dtype, or nullptr
  void* dinitial = nullptr;            // (batch or S, dim, N) compute type, or nullptr
  void* dA_partial = nullptr;          // (rows, dim, N)
  void* dD_partial = nullptr;          // (rows, dim), or nullptr
  void* ddelta_bias_partial = nullptr; // (rows, dim), or nullptr
  // Constant B/C: (rows, dim, N). Variable: (channel_blocks, batch, G, N, L), or nullptr when
  // they go over the checkpoints.
  void* dB_partial = nullptr;
  void* dC_partial = nullptr;
  int64_t channel_block = 32;          // channels per block of the variable partial sums
  // CUDA: a block's variable dB/dC sums of chunk c go over the checkpoint slots of its channels
  // at chunk c, which it alone reads, just before (saving the memory of the partials' array):
  // channel first_channel + 2 * step + (0 for dB, 1 for dC) holds the sums of step c * K + step,
  // by state. Needs blocks of at least 2 * K channels, all full, and one tile of states.
  bool BC_partials_over_checkpoints = false;
};

// CUDA: the gradients into which a pass after the backward adds the partial sums of
// SelectiveScanGrads (cuda/selective_scan/backward_sums.cuh): variable dB/dC (batch, G, N, L)
// contiguous in the input dtype; dA, constant dB/dC (dim, N), dD and d(delta_bias) (dim)
// contiguous in the compute type (nullptr: absent). Only that pass reads them, so they stay out
// of the backward kernel's parameters: a build with them in SelectiveScanGrads (and the store of
// the dB/dC sums written through the pass's BCPartials) compiled the backward to other code that
// ran 3-4 % slower (0.874 -> 0.906 ms bfloat16 at (8, 1536, 2048, 16), H100).
struct SelectiveScanGradTotals {
  void* dA = nullptr;
  void* dB = nullptr;
  void* dC = nullptr;
  void* dD = nullptr;
  void* ddelta_bias = nullptr;
};

template <class T>
PP_HD T ss_exp(T x) {
  if constexpr (sizeof(T) == 4) {
#if defined(__CUDA_ARCH__)
    return ::exp2f(x * 1.4426950408889634f);  // the special-function unit's exp2
#else
    return std::exp(x);
#endif
  } else {
    return pp_exp(x);
  }
}

// softplus with PyTorch's threshold (beta 1, threshold 20): x for x > 20.
template <class T>
PP_HD T softplus(T x) {
  return x > T(20) ? x : pp_log1p(pp_exp(x));
}

template <class T>
PP_HD T sigmoid(T x) {
  return T(1) / (T(1) + pp_exp(-x));
}

// delta after its bias and (optionally) softplus.
template <class T>
PP_HD T processed_delta(T raw, T bias, bool use_softplus) {
  const T x = raw + bias;
  return use_softplus ? softplus(x) : x;
}

template <class T>
PP_HD T silu(T x) {
  return x * sigmoid(x);
}

// d silu(x) / dx = sigmoid(x) * (1 + x * (1 - sigmoid(x))).
template <class T>
PP_HD T silu_grad(T x) {
  const T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}

}  // namespace parprims
