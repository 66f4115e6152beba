// CPU kernels of selective_scan: a fused forward and backward, parallel over tasks of
// (batch, group, block of channels) with at::parallel_for; each row walks time sequentially
// with its N states in a small local array, so no (batch, dim, N, L) tensor is ever made. A
// task first copies its group's variable B and C into (L, N) tables, so that each step reads
// its N values contiguously, and the N gates exp(delta * A) of a step are computed four at a
// time (vector_exp.h). The backward recomputes a row's states and gates once into row-sized
// buffers, then walks time backwards (the reverse affine recurrence of the state gradients).
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <vector>

#include "../host/selective_scan_host.h"
#include "../host/scan_dispatch.h"
#include "vector_exp.h"

namespace parprims::cpu {
namespace {

// Typed views of the params for one (batch b, channel d) row.
template <class In, class Acc>
struct Row {
  const SelectiveScanParams& p;
  int64_t b, d, group;
  Acc D, bias;

  Row(const SelectiveScanParams& params, int64_t b_, int64_t d_)
      : p(params), b(b_), d(d_), group(params.group_of(d_)) {
    D = p.D ? static_cast<const Acc*>(p.D)[d] : Acc(0);
    bias = p.delta_bias ? static_cast<const Acc*>(p.delta_bias)[d] : Acc(0);
  }
  Acc seq(const SeqTensor& s, int64_t t) const {
    return static_cast<Acc>(static_cast<const In*>(s.data)[s.offset(b, d, t)]);
  }
  Acc raw_delta(int64_t t) const { return seq(p.delta, t) + bias; }
  Acc delta(int64_t t) const {
    const Acc x = raw_delta(t);
    return p.delta_softplus ? softplus(x) : x;
  }
  Acc A(int64_t n) const { return static_cast<const Acc*>(p.A)[d * p.dstate + n]; }
  // State rows (batch or sequence k, d, :) of a (K, dim, N) tensor in the compute type.
  int64_t state_index(int64_t k, int64_t n) const { return (k * p.dim + d) * p.dstate + n; }
  // The first sequence index; with packed sequences, where sequence k ends.
  int64_t state_row() const { return p.offsets ? 0 : b; }
  int64_t seq_end(int64_t k) const { return (p.offsets && k + 1 < p.num_seqs) ? p.seq_offset(k + 1) : p.len; }
  int64_t last_seq() const { return p.offsets ? p.num_seqs - 1 : b; }
  void load_initial(int64_t k, Acc* h) const {
    const Acc* init = static_cast<const Acc*>(p.initial_state);
    for (int64_t n = 0; n < p.dstate; ++n) h[n] = init ? init[state_index(k, n)] : Acc(0);
  }
};

// B or C as a row of N values per step: for variable inputs, one (batch, group)'s (L, N) table
// in the compute type, shared by the task's channels; for constant ones, one channel's N values
// (the same row every step).
template <class In, class Acc>
struct StateTable {
  std::vector<Acc> values;
  int64_t step_stride = 0;

  void load(const SelectiveScanParams& p, const StateInput& s, int64_t b, int64_t group) {
    if (!s.variable) return;
    const int64_t N = p.dstate, L = p.len;
    values.resize(static_cast<size_t>(L * N));
    step_stride = N;
    const In* data = static_cast<const In*>(s.data);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t t = 0; t < L; ++t) values[t * N + n] = static_cast<Acc>(data[s.offset(b, group, 0, n, t)]);
    }
  }
  // The constant rows are per channel: reloaded for each of the task's channels.
  void load_channel(const SelectiveScanParams& p, const StateInput& s, int64_t d) {
    if (s.variable) return;
    values.resize(static_cast<size_t>(p.dstate));
    step_stride = 0;
    for (int64_t n = 0; n < p.dstate; ++n) values[n] = static_cast<const Acc*>(s.data)[s.offset(0, 0, d, n, 0)];
  }
  const Acc* at(int64_t t) const { return values.data() + t * step_stride; }
};

// gate[n] = exp(delta * A[n]) for the N states of a step.
template <class Acc>
void gates(Acc delta, const Acc* A, int64_t N, Acc* gate) {
  for (int64_t n = 0; n < N; ++n) gate[n] = delta * A[n];
  exp_in_place(gate, N);
}

// Calls f(b, group, first channel, end channel) for tasks of up to `channel_block` channels of
// one (batch, group), in parallel.
template <class F>
void for_each_task(const SelectiveScanParams& p, int64_t channel_block, F&& f) {
  const int64_t blocks = (p.dim_per_group + channel_block - 1) / channel_block;
  at::parallel_for(0, p.batch * p.groups * blocks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (p.groups * blocks), g = (task / blocks) % p.groups, cb = task % blocks;
      const int64_t d_lo = g * p.dim_per_group + cb * channel_block;
      f(b, g, d_lo, std::min(g * p.dim_per_group + p.dim_per_group, d_lo + channel_block));
    }
  });
}

// The forward's channels per task: up to 32 (the B/C tables are shared by a task's channels),
// fewer when that leaves a thread without tasks.
int64_t forward_channel_block(const SelectiveScanParams& p) {
  const int64_t tasks_wanted = 2 * at::get_num_threads();
  const int64_t rows_per_task = (p.batch * p.groups * p.dim_per_group + tasks_wanted - 1) / tasks_wanted;
  return std::max<int64_t>(1, std::min<int64_t>({32, p.dim_per_group, rows_per_task}));
}

template <class In, class Acc>
void forward_row(const SelectiveScanParams& p, int64_t b, int64_t d, const StateTable<In, Acc>& B_table,
                 const StateTable<In, Acc>& C_table) {
  const Row<In, Acc> r(p, b, d);
  const int64_t N = p.dstate;
  std::vector<Acc> h(N), A(N), gate(N);
  for (int64_t n = 0; n < N; ++n) A[n] = r.A(n);
  Acc* last = static_cast<Acc*>(p.last_state);
  int64_t k = r.state_row();
  int64_t end = r.seq_end(k);
  r.load_initial(k, h.data());
  In* out = static_cast<In*>(const_cast<void*>(p.out.data));
  for (int64_t t = 0; t < p.len; ++t) {
    while (p.offsets && k + 1 < p.num_seqs && t >= end) {  // sequence k ends: save, restart
      for (int64_t n = 0; n < N; ++n) last[r.state_index(k, n)] = h[n];
      end = r.seq_end(++k);
      r.load_initial(k, h.data());
    }
    if (p.checkpoints && t % kSelectiveScanCheckpointEvery == 0) {
      Acc* c = static_cast<Acc*>(p.checkpoints) +
               ((b * p.dim + d) * p.checkpoint_chunks + t / kSelectiveScanCheckpointEvery) * N;
      std::copy(h.begin(), h.end(), c);
    }
    const Acc dl = r.delta(t);
    const Acc u = r.seq(p.u, t);
    const Acc du = dl * u;
    gates(dl, A.data(), N, gate.data());
    const Acc* Bt = B_table.at(t);
    const Acc* Ct = C_table.at(t);
    Acc y = 0;
    for (int64_t n = 0; n < N; ++n) {
      h[n] = gate[n] * h[n] + du * Bt[n];
      y += Ct[n] * h[n];
    }
    y += r.D * u;
    if (p.z.data) y *= silu(r.seq(p.z, t));
    out[p.out.offset(b, d, t)] = static_cast<In>(y);
  }
  for (; k <= r.last_seq(); ++k) {  // the last sequence, then empty ones keep their initial state
    for (int64_t n = 0; n < N; ++n) last[r.state_index(k, n)] = h[n];
    if (k < r.last_seq()) r.load_initial(k + 1, h.data());
  }
}

template <class In, class Acc>
void forward_rows(const SelectiveScanParams& p) {
  for_each_task(p, forward_channel_block(p), [&](int64_t b, int64_t g, int64_t d_lo, int64_t d_hi) {
    StateTable<In, Acc> B_table, C_table;
    B_table.load(p, p.B, b, g);
    C_table.load(p, p.C, b, g);
    for (int64_t d = d_lo; d < d_hi; ++d) {
      B_table.load_channel(p, p.B, d);
      C_table.load_channel(p, p.C, d);
      forward_row(p, b, d, B_table, C_table);
    }
  });
}

// The backward of the rows of one (batch b, group g, channel block cb) task. Channels run in
// order inside the task, so the partial sums of variable B/C (over the task's channels) are
// added in a fixed order.
template <class In, class Acc>
void backward_task(const SelectiveScanParams& p, const SelectiveScanGrads& gr, int64_t b, int64_t g, int64_t d_lo,
                   int64_t d_hi) {
  const int64_t N = p.dstate, L = p.len;
  const int64_t cb = (d_lo - g * p.dim_per_group) / gr.channel_block;
  // Per row: the state entering each step, its gates, delta and y.
  std::vector<Acc> hprev(L * N), gate(L * N), dl(L), y(L), h(N), A(N), lam(N);
  StateTable<In, Acc> B_table, C_table;
  B_table.load(p, p.B, b, g);
  C_table.load(p, p.C, b, g);
  // Variable B/C: this task's partial sums (batch b, group g, channel block cb), (N, L).
  Acc* dB_var = p.B.variable ? static_cast<Acc*>(gr.dB_partial) + ((cb * p.batch + b) * p.groups + g) * N * L : nullptr;
  Acc* dC_var = p.C.variable ? static_cast<Acc*>(gr.dC_partial) + ((cb * p.batch + b) * p.groups + g) * N * L : nullptr;
  if (p.B.variable) std::fill(dB_var, dB_var + N * L, Acc(0));
  if (p.C.variable) std::fill(dC_var, dC_var + N * L, Acc(0));
  auto out_at = [&](void* base, int64_t d, int64_t t) -> In& {
    return static_cast<In*>(base)[(b * p.dim + d) * L + t];
  };
  for (int64_t d = d_lo; d < d_hi; ++d) {
    const Row<In, Acc> r(p, b, d);
    for (int64_t n = 0; n < N; ++n) A[n] = r.A(n);
    B_table.load_channel(p, p.B, d);
    C_table.load_channel(p, p.C, d);
    // ---- recompute the forward: the state entering each step, and y ----
    int64_t k = r.state_row();
    int64_t end = r.seq_end(k);
    r.load_initial(k, h.data());
    for (int64_t t = 0; t < L; ++t) {
      while (p.offsets && k + 1 < p.num_seqs && t >= end) {
        end = r.seq_end(++k);
        r.load_initial(k, h.data());
      }
      dl[t] = r.delta(t);
      const Acc du = dl[t] * r.seq(p.u, t);
      Acc* gate_t = gate.data() + t * N;
      gates(dl[t], A.data(), N, gate_t);
      const Acc* Bt = B_table.at(t);
      const Acc* Ct = C_table.at(t);
      Acc yt = 0;
      for (int64_t n = 0; n < N; ++n) {
        hprev[t * N + n] = h[n];
        h[n] = gate_t[n] * h[n] + du * Bt[n];
        yt += Ct[n] * h[n];
      }
      y[t] = yt + r.D * r.seq(p.u, t);
    }
    // ---- walk back: lam_t = C_t dy_t + a_{t+1} lam_{t+1} ----
    const Acc* dlast = static_cast<const Acc*>(gr.dlast_state);
    Acc dD = 0, dbias = 0;
    std::vector<Acc> dA(N, Acc(0)), dBc(N, Acc(0)), dCc(N, Acc(0));
    k = r.last_seq();
    bool seq_ends_here = true;  // the next step (walking back) is the last of its sequence
    for (int64_t t = L - 1; t >= 0; --t) {
      while (p.offsets && k > 0 && t < p.seq_offset(k)) --k;
      if (p.offsets) seq_ends_here = t + 1 == r.seq_end(k);
      if (seq_ends_here) {
        for (int64_t n = 0; n < N; ++n) lam[n] = dlast ? dlast[r.state_index(k, n)] : Acc(0);
      }
      const bool seq_starts_here = p.offsets ? t == p.seq_offset(k) : t == 0;
      const Acc u = r.seq(p.u, t);
      const Acc gout = r.seq(gr.dout, t);
      Acc dy = gout;
      if (p.z.data) {
        const Acc zt = r.seq(p.z, t);
        dy = gout * silu(zt);
        out_at(gr.dz, d, t) = static_cast<In>(gout * y[t] * silu_grad(zt));
      }
      dD += dy * u;
      Acc du = dy * r.D, ddl = 0;
      const Acc* B_t = B_table.at(t);
      const Acc* C_t = C_table.at(t);
      for (int64_t n = 0; n < N; ++n) {
        const Acc a = gate[t * N + n];
        const Acc Bt = B_t[n], Ct = C_t[n];
        const Acc hp = hprev[t * N + n];
        const Acc ht = a * hp + dl[t] * u * Bt;
        const Acc l = lam[n] + Ct * dy;
        const Acc dC = dy * ht, dB = l * dl[t] * u;
        if (p.C.variable) dC_var[n * L + t] += dC; else dCc[n] += dC;
        if (p.B.variable) dB_var[n * L + t] += dB; else dBc[n] += dB;
        const Acc da = l * hp * a;  // d(loss)/d(delta*A) through the gate
        ddl += l * Bt * u + da * A[n];
        du += l * Bt * dl[t];
        dA[n] += da * dl[t];
        lam[n] = a * l;  // what the previous step receives
        if (seq_starts_here && gr.dinitial) static_cast<Acc*>(gr.dinitial)[r.state_index(k, n)] = a * l;
      }
      const Acc x = r.raw_delta(t);
      const Acc draw = p.delta_softplus ? ddl * (x > Acc(20) ? Acc(1) : sigmoid(x)) : ddl;
      dbias += draw;
      out_at(gr.du, d, t) = static_cast<In>(du);
      out_at(gr.ddelta, d, t) = static_cast<In>(draw);
      seq_ends_here = seq_starts_here;
    }
    for (int64_t n = 0; n < N; ++n) {
      static_cast<Acc*>(gr.dA_partial)[(b * p.dim + d) * N + n] = dA[n];
      if (!p.B.variable) static_cast<Acc*>(gr.dB_partial)[(b * p.dim + d) * N + n] = dBc[n];
      if (!p.C.variable) static_cast<Acc*>(gr.dC_partial)[(b * p.dim + d) * N + n] = dCc[n];
    }
    if (gr.dD_partial) static_cast<Acc*>(gr.dD_partial)[b * p.dim + d] = dD;
    if (gr.ddelta_bias_partial) static_cast<Acc*>(gr.ddelta_bias_partial)[b * p.dim + d] = dbias;
  }
}

template <class In, class Acc>
void backward_rows(const SelectiveScanParams& p, const SelectiveScanGrads& gr) {
  // The task's channels are gr.channel_block, the block of the variable dB/dC partial sums.
  for_each_task(p, gr.channel_block, [&](int64_t b, int64_t g, int64_t d_lo, int64_t d_hi) {
    backward_task<In, Acc>(p, gr, b, g, d_lo, d_hi);
  });
}

template <class F>
void visit_input_dtype(at::ScalarType t, F&& f) {
  host::visit_floating(t, [&](auto tag) {
    using In = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<In, double>, double, float>;
    f(host::Tag<In>{}, host::Tag<Acc>{});
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> selective_scan_forward(
    const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
    const host::OptionalTensor& D, const host::OptionalTensor& z, const host::OptionalTensor& delta_bias,
    bool delta_softplus, const host::OptionalTensor& initial_state, const host::OptionalTensor& cu_seqlens,
    bool save_checkpoints, bool /*private_checkpoints: autograd's business*/) {
  // The CPU backward recomputes each row from its start; the checkpoints are saved all the
  // same, so that both devices return the same outputs.
  auto fw = host::prepare_selective_scan_forward(
      host::check_selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, cu_seqlens),
      save_checkpoints ? kSelectiveScanCheckpointEvery : 0);
  visit_input_dtype(u.scalar_type(), [&](auto in, auto acc) {
    forward_rows<typename decltype(in)::type, typename decltype(acc)::type>(fw.params);
  });
  return {fw.out, fw.last_state, fw.checkpoints};
}

host::SelectiveScanGradients selective_scan_backward(
    const at::Tensor& grad_out, const host::OptionalTensor& grad_last_state, const at::Tensor& u,
    const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
    const host::OptionalTensor& D, const host::OptionalTensor& z, const host::OptionalTensor& delta_bias,
    bool delta_softplus, const host::OptionalTensor& initial_state, const host::OptionalTensor& cu_seqlens,
    const at::Tensor& checkpoints) {
  auto bw = host::prepare_selective_scan_backward(
      host::check_selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, cu_seqlens),
      grad_out, grad_last_state, checkpoints, /*checkpoint_every=*/0, /*channel_block=*/32);
  visit_input_dtype(u.scalar_type(), [&](auto in, auto acc) {
    backward_rows<typename decltype(in)::type, typename decltype(acc)::type>(bw.params, bw.grads);
  });
  return host::finish_selective_scan_backward(bw);
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) {
  m.impl("_selective_scan_forward", &selective_scan_forward);
  m.impl("_selective_scan_backward", &selective_scan_backward);
  // The CPU backward does not read the checkpoints: it leaves them as they are.
  m.impl("_selective_scan_backward_consuming", &selective_scan_backward);
}

}  // namespace parprims::cpu
