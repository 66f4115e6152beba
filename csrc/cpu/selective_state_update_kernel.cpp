// CPU kernel of selective_state_update: parallel over the (batch, head, channel) rows with
// at::parallel_for; each row walks its N states, updating them in place through their strides.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <type_traits>

#include "../host/scan_dispatch.h"
#include "../host/selective_state_update_host.h"

namespace parprims::cpu {
namespace {

template <class In, class BC, class Acc>
void update_rows(const SelectiveStateUpdateParams& p) {
  const int64_t grain = std::max<int64_t>(1, 2048 / p.dstate);
  at::parallel_for(0, p.rows(), grain, [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const StateUpdateRow<In, BC, Acc> r(p, row);
      Acc y = Acc(0);
      for (int64_t n = 0; n < p.dstate; ++n) y += r.update(n);
      r.finish(y);
    }
  });
}

at::Tensor selective_state_update(const at::Tensor& state, const at::Tensor& x, const at::Tensor& dt,
                                  const at::Tensor& A, const at::Tensor& B, const at::Tensor& C,
                                  const c10::optional<at::Tensor>& D, const c10::optional<at::Tensor>& z,
                                  const c10::optional<at::Tensor>& dt_bias, bool dt_softplus) {
  const auto su = host::prepare_selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus);
  if (su.params.rows() == 0) return su.out;
  host::visit_floating(su.input, [&](auto tag) {
    using In = typename decltype(tag)::type;
    using Acc = std::conditional_t<std::is_same_v<In, double>, double, float>;
    if constexpr (std::is_same_v<In, Acc>) {
      update_rows<In, In, Acc>(su.params);
    } else if (su.bc == at::kFloat) {  // half inputs with float32 B and C
      update_rows<In, float, Acc>(su.params);
    } else {
      update_rows<In, In, Acc>(su.params);
    }
  });
  return su.out;
}

}  // namespace

TORCH_LIBRARY_IMPL(parprims, CPU, m) { m.impl("selective_state_update", &selective_state_update); }

}  // namespace parprims::cpu
