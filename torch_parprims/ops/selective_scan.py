"""The selective scan of Mamba-1 and its decode step: wrappers, fake kernels and autograd.

The forward is one fused kernel per device that keeps the (batch, dim, N) states in registers
and never writes the (batch, dim, N, L) states; when autograd will need them it saves the state
entering every 16th step ("checkpoints"). The backward restarts from those checkpoints, and
walks time backwards with the reverse affine recurrence of the state gradients
``g_t = C_t dy_t + exp(delta_{t+1} A) g_{t+1}``. Gradients of parameters shared across rows are
sums of per-task partials added in a fixed order, so two backward runs give identical bits.
On CUDA the eager backward writes the partial sums of dB and dC over the checkpoints it has
read, in place of an array of their own (see ``_backward``).
"""
from typing import Optional, Tuple, Union

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

_ops = torch.ops.parprims

Tensor = torch.Tensor


def selective_scan(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    delta_bias: Optional[Tensor] = None,
    delta_softplus: bool = False,
    initial_state: Optional[Tensor] = None,
    cu_seqlens: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Mamba-1's selective scan, fused: returns ``(out, last_state)``.

    For every batch row b, channel d and state n, along time t::

        delta_t = softplus(delta_t + delta_bias[d])        (softplus if delta_softplus)
        h_t     = exp(delta_t * A[d, n]) * h_{t-1} + delta_t * B_t[n] * u_t
        out_t   = (sum_n C_t[n] * h_t + D[d] * u_t) * silu(z_t)   (D, z optional)

    Args:
        u, delta: ``(batch, dim, L)``, float32, float16, bfloat16 or float64; any strides (views
            of a ``(batch, L, dim)`` tensor are read in place).
        A: ``(dim, N)`` float32 (float64 with float64 inputs); any N >= 1.
        B, C: ``(dim, N)`` constant over time, ``(batch, N, L)`` variable, or
            ``(batch, G, N, L)`` grouped (channel d reads group ``d // (dim // G)``); variable
            B and C have u's dtype.
        D, delta_bias: ``(dim,)``, float32.
        z: ``(batch, dim, L)`` gate, u's dtype.
        delta_softplus: apply softplus (threshold 20, as ``torch.nn.functional.softplus``).
        initial_state: ``h_{-1}``, ``(batch, dim, N)``; with ``cu_seqlens``, ``(S, dim, N)``.
            float32 (float64 with float64 inputs). Zeros when ``None``.
        cu_seqlens: packed sequences along L (batch must be 1): int32 or int64 offsets of
            length S+1 starting at 0; the state restarts at every sequence.

    Returns:
        ``out`` ``(batch, dim, L)`` in u's dtype, and ``last_state`` ``(batch, dim, N)``
        (``(S, dim, N)`` with ``cu_seqlens``; an empty sequence keeps its initial state) in
        float32 (float64 for float64 inputs). Gradients flow to every floating input,
        ``initial_state`` and through ``last_state``.

    Example::

        >>> b, d, L, n = 2, 4, 16, 8
        >>> u, delta, z = torch.randn(b, d, L), torch.rand(b, d, L), torch.randn(b, d, L)
        >>> A, B, C = -torch.rand(d, n), torch.randn(b, n, L), torch.randn(b, n, L)
        >>> out, last = selective_scan(u, delta, A, B, C, z=z, delta_softplus=True)
        >>> # packed sequences give what each sequence alone gives
        >>> cu = torch.tensor([0, 5, 16])
        >>> packed, _ = selective_scan(u[:1], delta[:1], A, B[:1], C[:1], cu_seqlens=cu)
        >>> alone, _ = selective_scan(u[:1, :, 5:], delta[:1, :, 5:], A, B[:1, :, 5:], C[:1, :, 5:])
        >>> assert torch.allclose(packed[..., 5:], alone, atol=1e-5)
    """
    return _ops.selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, cu_seqlens)


def selective_scan_fn(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    delta_bias: Optional[Tensor] = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    *,
    initial_state: Optional[Tensor] = None,
    cu_seqlens: Optional[Tensor] = None,
) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """A drop-in for mamba-ssm's ``selective_scan_fn``: the same arguments and return convention.

    Returns ``out``, or ``(out, last_state)`` with ``return_last_state=True``. The keyword-only
    ``initial_state`` and ``cu_seqlens`` are this library's additions; see
    :func:`selective_scan` for shapes and dtypes.

    Example::

        >>> # from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
        >>> from torch_parprims import selective_scan_fn
        >>> u, delta = torch.randn(1, 4, 10), torch.rand(1, 4, 10)
        >>> A, B, C = -torch.rand(4, 8), torch.randn(1, 8, 10), torch.randn(1, 8, 10)
        >>> out, last = selective_scan_fn(u, delta, A, B, C, return_last_state=True)
        >>> assert out.shape == (1, 4, 10) and last.shape == (1, 4, 8)
    """
    out, last_state = selective_scan(
        u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state=initial_state, cu_seqlens=cu_seqlens
    )
    return (out, last_state) if return_last_state else out


def selective_state_update(
    state: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = False,
) -> Tensor:
    """One decode step of the selective scan: updates ``state`` in place and returns ``out``.

    Computes, for one new token, ``state = exp(dt * A) * state + dt * B * x`` and
    ``out = (sum_n C * state + D * x) * silu(z)`` (mamba-ssm's ``selective_state_update``).

    Shapes, without heads: ``state (batch, dim, N)``; ``x, dt, z (batch, dim)``;
    ``A (dim, N)``; ``B, C (batch, N)`` or ``(batch, G, N)`` (channel d reads group
    ``d // (dim // G)``); ``D, dt_bias (dim,)``. With heads:
    ``state (batch, H, P, N)``; ``x, dt, z (batch, H, P)``; ``A (H, P, N)``;
    ``B, C (batch, G, N)`` (head h reads group ``h // (H // G)``); ``D, dt_bias (H, P)``.
    ``state`` is float32 (float64 with float64 inputs) and stays so whatever x's dtype;
    ``out`` has x's dtype. x, dt, z, B and C share a dtype (B and C may also be float32); A, D
    and dt_bias are float32 (or float64 with float64 inputs). Every tensor may have any strides;
    ``state`` may be a view, updated in place through its strides. Not differentiable (it is a
    decoding step).

    Example::

        >>> state = torch.zeros(2, 4, 8)
        >>> x, dt = torch.randn(2, 4), torch.rand(2, 4)
        >>> A, B, C = -torch.rand(4, 8), torch.randn(2, 8), torch.randn(2, 8)
        >>> out = selective_state_update(state, x, dt, A, B, C)
        >>> assert out.shape == (2, 4) and state.abs().sum() > 0
    """
    return _ops.selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus)


# ---- fake kernels -------------------------------------------------------------------------


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _num_states(u: Tensor, cu_seqlens: Optional[Tensor]):
    return u.shape[0] if cu_seqlens is None else cu_seqlens.shape[0] - 1


@torch.library.register_fake("parprims::_selective_scan_forward")
def _forward_fake(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, cu_seqlens, save_checkpoints,
                  private_checkpoints=False):
    batch, dim, length = u.shape
    n = A.shape[1]
    cdt = _compute_dtype(u.dtype)
    out = u.new_empty(u.shape)
    last = u.new_empty((_num_states(u, cu_seqlens), dim, n), dtype=cdt)
    if save_checkpoints:
        every = _ops._selective_scan_checkpoint_every()
        checkpoints = u.new_empty((batch, dim, (length + every - 1) // every, n), dtype=cdt)
    else:
        checkpoints = u.new_empty((0, dim, 0, n), dtype=cdt)
    return out, last, checkpoints


@torch.library.register_fake("parprims::_selective_scan_backward")
@torch.library.register_fake("parprims::_selective_scan_backward_consuming")
def _backward_fake(grad_out, grad_last_state, u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state,
                   cu_seqlens, checkpoints):
    dim, n = A.shape
    cdt = _compute_dtype(u.dtype)

    def none():  # each absent gradient is its own empty tensor (outputs never alias)
        return u.new_empty((0,), dtype=cdt)

    def state_input_grad(P):
        if P.dim() == 2:
            return u.new_empty((dim, n), dtype=cdt)
        groups = P.shape[1] if P.dim() == 4 else 1
        return u.new_empty((u.shape[0], groups, n, u.shape[2]))

    return (
        u.new_empty(u.shape),
        u.new_empty(u.shape),
        u.new_empty((dim, n), dtype=cdt),
        state_input_grad(B),
        state_input_grad(C),
        u.new_empty((dim,), dtype=cdt) if D is not None else none(),
        u.new_empty(u.shape) if z is not None else none(),
        u.new_empty((dim,), dtype=cdt) if delta_bias is not None else none(),
        u.new_empty((_num_states(u, cu_seqlens), dim, n), dtype=cdt) if initial_state is not None else none(),
    )


@torch.library.register_fake("parprims::selective_state_update")
def _state_update_fake(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False):
    return x.new_empty(x.shape)


# ---- autograd -------------------------------------------------------------------------------


def _setup(ctx, inputs, output):
    u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, cu_seqlens, _, *private = inputs
    ctx.delta_softplus = delta_softplus
    ctx.private_checkpoints = bool(private and private[0])
    # An unused output's gradient stays None: zeros of the checkpoints' size would cost as much
    # memory as the output itself (the backward handles None for out and last_state).
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias, initial_state, cu_seqlens, output[2])


def _in_eager_mode(t: Tensor) -> bool:
    """Whether ``t`` is a plain tensor of an eager call: not traced, faked or compiled."""
    return (type(t) is torch.Tensor and not torch.compiler.is_compiling()
            and _get_current_dispatch_mode() is None)


def _backward(ctx, grad_out, grad_last_state, _grad_checkpoints):
    u, delta, A, B, C, D, z, delta_bias, initial_state, cu_seqlens, checkpoints = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(u)
    # When no caller sees the checkpoints (selective_scan's), the first eager backward lets the
    # kernel write its partial sums of dB and dC over them once it has read them (one
    # (batch, dim, L) float32 array less at the peak; the kernel decides whether they fit). A
    # second backward through the same graph (retain_graph=True) takes them as spent and has the
    # op recompute them from the inputs. A
    # traced backward (torch.compile, export) keeps them: its graph may run more than once with
    # nothing to mark them spent.
    backward_op = _ops._selective_scan_backward
    if getattr(ctx, "checkpoints_spent", False):
        checkpoints = checkpoints.new_empty((0,) + tuple(checkpoints.shape[1:]))
    elif ctx.private_checkpoints and _in_eager_mode(checkpoints):
        backward_op = _ops._selective_scan_backward_consuming
        ctx.checkpoints_spent = True
    du, ddelta, dA, dB, dC, dD, dz, dbias, dinit = backward_op(
        grad_out, grad_last_state, u, delta, A, B, C, D, z, delta_bias, ctx.delta_softplus, initial_state,
        cu_seqlens, checkpoints,
    )

    def like(grad, t):
        return None if t is None else grad.reshape(t.shape).to(t.dtype)

    return (du, ddelta, like(dA, A), like(dB, B), like(dC, C), like(dD, D), like(dz, z), like(dbias, delta_bias),
            None, like(dinit, initial_state), None, None, None)


torch.library.register_autograd("parprims::_selective_scan_forward", _backward, setup_context=_setup)
