// selective_state_update (one decode step of the selective scan) as the CPU and CUDA kernels see
// it: plain pointers, sizes and strides, and the per-row arithmetic both devices share.
// Torch-free.
//
// Everything is in the heads form: state (batch, H, P, N); x, dt, z, out (batch, H, P);
// A (H, P, N); B, C (batch, G, N), head h reading group h / (H / G); D, dt_bias (H, P). The
// host views the form without heads (state (batch, dim, N)) as H = dim heads of P = 1 channel,
// so that channel d reads group d / (dim / G) as it should. For every (b, h, p) row and n:
//   dt       = softplus(dt + dt_bias[h, p])               (softplus only when dt_softplus)
//   state[n] = exp(dt * A[h, p, n]) * state[n] + dt * B[b, g, n] * x
//   out      = (sum_n C[b, g, n] * state[n] + D[h, p] * x) * silu(z)      (D, z when given)
// Every tensor is read (and state written) through its strides, with 64-bit offsets.
#pragma once

#include "selective_scan.h"

namespace parprims {

// A strided (batch, H, P) tensor: x, dt, z and out.
struct HeadRowTensor {
  const void* data = nullptr;
  int64_t batch_stride = 0, head_stride = 0, dim_stride = 0;
  PP_HD int64_t offset(int64_t b, int64_t h, int64_t p) const {
    return b * batch_stride + h * head_stride + p * dim_stride;
  }
};

// A strided tensor of up to three dimensions (i, j, k): A (H, P, N), B and C (batch, G, N),
// D and dt_bias (H, P) (k unused).
struct Strided3 {
  const void* data = nullptr;
  int64_t stride0 = 0, stride1 = 0, stride2 = 0;
  PP_HD int64_t offset(int64_t i, int64_t j, int64_t k = 0) const { return i * stride0 + j * stride1 + k * stride2; }
};

struct SelectiveStateUpdateParams {
  int64_t batch = 0, heads = 0, dim = 0, dstate = 0;  // dim: P, the channels of a head
  int64_t heads_per_group = 1;                        // H / G
  // state (batch, H, P, N), compute type, updated in place.
  void* state = nullptr;
  int64_t state_batch_stride = 0, state_head_stride = 0, state_dim_stride = 0, state_dstate_stride = 0;
  HeadRowTensor x, dt, z, out;  // z.data: nullptr when absent
  Strided3 A;                   // (H, P, N), compute type
  Strided3 B, C;                // (batch, G, N), x's dtype or float32 (the kernel's BC type)
  Strided3 D, dt_bias;          // (H, P), compute type; data nullptr when absent
  bool dt_softplus = false;

  PP_HD int64_t rows() const { return batch * heads * dim; }
  PP_HD int64_t state_offset(int64_t b, int64_t h, int64_t p, int64_t n) const {
    return b * state_batch_stride + h * state_head_stride + p * state_dim_stride + n * state_dstate_stride;
  }
};

// One (b, h, p) row of the update. `In`: x, dt, z and out; `BC`: B and C; `Acc`: the compute
// type (also the state's and A's, D's, dt_bias's). A device calls update(n) for each n of the
// row (any split of the n among threads), sums what they return, and passes the sum to
// finish(), once per row.
template <class In, class BC, class Acc>
struct StateUpdateRow {
  const SelectiveStateUpdateParams& p;
  int64_t b, h, d, g;
  Acc x, dt;

  PP_HD StateUpdateRow(const SelectiveStateUpdateParams& params, int64_t row) : p(params) {
    d = row % p.dim;
    const int64_t bh = row / p.dim;
    h = bh % p.heads;
    b = bh / p.heads;
    g = h / p.heads_per_group;
    x = static_cast<Acc>(static_cast<const In*>(p.x.data)[p.x.offset(b, h, d)]);
    const Acc bias = p.dt_bias.data ? static_cast<const Acc*>(p.dt_bias.data)[p.dt_bias.offset(h, d)] : Acc(0);
    dt = processed_delta(static_cast<Acc>(static_cast<const In*>(p.dt.data)[p.dt.offset(b, h, d)]), bias,
                         p.dt_softplus);
  }

  // Updates state[n]; returns C[n] * its new value.
  PP_HD Acc update(int64_t n) const {
    Acc* state = static_cast<Acc*>(p.state) + p.state_offset(b, h, d, n);
    const Acc a = static_cast<const Acc*>(p.A.data)[p.A.offset(h, d, n)];
    const Acc Bn = static_cast<Acc>(static_cast<const BC*>(p.B.data)[p.B.offset(b, g, n)]);
    const Acc Cn = static_cast<Acc>(static_cast<const BC*>(p.C.data)[p.C.offset(b, g, n)]);
    const Acc s = ss_exp(dt * a) * *state + dt * Bn * x;
    *state = s;
    return Cn * s;
  }

  // Writes out from the sum over n of what update() returned.
  PP_HD void finish(Acc y) const {
    if (p.D.data) y += static_cast<const Acc*>(p.D.data)[p.D.offset(h, d)] * x;
    if (p.z.data) y *= silu(static_cast<Acc>(static_cast<const In*>(p.z.data)[p.z.offset(b, h, d)]));
    static_cast<In*>(const_cast<void*>(p.out.data))[p.out.offset(b, h, d)] = static_cast<In>(y);
  }
};

}  // namespace parprims
