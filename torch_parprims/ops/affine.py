"""Affine recurrences h_t = a_t h_{t-1} + b_t: wrappers, fake kernels and autograd.

Every backward is a reverse affine scan of the same engine over the conjugated gates,
followed by elementwise products: for h_t = a_t h_{t-1} + b_t with incoming gradients gh
(of h) and gf (of the final state), lambda_t = gh_t + conj(a_{t+1}) lambda_{t+1} is an
exclusive reverse scan, db = lambda, da = lambda * conj(h_{t-1}).
"""
from typing import Optional, Tuple

import torch

from . import _args

_ops = torch.ops.parprims


@_args.takes_offsets("b")
def affine_scan(
    a: torch.Tensor,
    b: torch.Tensor,
    dim: int = -1,
    initial_state: Optional[torch.Tensor] = None,
    offsets: Optional[torch.Tensor] = None,
    reverse: bool = False,
    log_gates: bool = False,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The elementwise linear recurrence ``h_t = a_t * h_{t-1} + b_t`` along ``dim``.

    Args:
        a: gates, broadcastable to ``b`` (e.g. ``(1, C, T)`` shared over the batch; never
            materialized). A Python number or a 0-d tensor is one gate for every element
            (converted to ``b``'s dtype and device). With ``log_gates=True``, ``a`` holds
            ``log a``.
        b: inputs, e.g. ``(B, C, T)`` with ``dim=-1`` or ``(B, T, C)`` with ``dim=1``; any
            strides. float16, bfloat16 (computed in float32), float32, float64, complex64,
            complex128 (LRU-style complex gates; on the CPU, float32 and complex64 recur in
            double precision); ``a`` has ``b``'s dtype.
        dim: the time dimension.
        initial_state: ``h_{-1}``, shaped like ``b`` without ``dim``; with ``offsets``,
            ``(S, *that)``, one per sequence. Zeros when ``None``. float32 for half inputs
            (the input dtype is accepted too).
        offsets: packed sequences along ``dim`` (``cu_seqlens``, length S+1): the
            recurrence restarts at every sequence start. 1-D int32/int64 tensor on ``b``'s
            device, as for :func:`segmented_scan`.
        reverse: run from the end, ``h_t = a_t * h_{t+1} + b_t``; the initial state then
            enters at each sequence's end and the final state is the one at its start.
        log_gates: ``a`` is given in log space.
        cu_seqlens: a keyword alias of ``offsets`` (flash-attn's name); give one of the two.

    Returns:
        ``(h, final_state)``: ``h`` shaped like ``b``; ``final_state`` shaped like
        ``initial_state`` (float32 for half inputs), the last ``h`` of each row/sequence.

    Example::

        >>> a, b = torch.rand(2, 3, 5), torch.randn(2, 3, 5)
        >>> h, last = affine_scan(a, b)
        >>> h1 = a[..., 1] * h[..., 0] + b[..., 1]
        >>> assert torch.allclose(h[..., 1], h1) and torch.equal(last, h[..., -1])
        >>> h, _ = affine_scan(0.9, b)  # one gate for every element
    """
    # b and offsets are checked, and cu_seqlens arrives as offsets (see _args.takes_offsets).
    a = _args.gate(a, b)
    return _ops.affine_scan(a, b, dim, initial_state, offsets, reverse, log_gates)


@_args.takes_offsets("b")
def matrix_affine_scan(
    A: torch.Tensor,
    b: torch.Tensor,
    dim: int = -2,
    initial_state: Optional[torch.Tensor] = None,
    offsets: Optional[torch.Tensor] = None,
    reverse: bool = False,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """The dense linear recurrence ``h_t = A_t @ h_{t-1} + b_t`` with small states (d <= 8).

    Args:
        A: ``(..., L, d, d)`` transition matrices, leading dims broadcastable to ``b``'s.
        b: ``(..., L, d)`` inputs; float32 or float64 (on the CPU, float32 recurs in double).
        dim: the time dimension of ``b`` (not its last, state dimension). Default -2.
        initial_state: ``(*b.shape without dim)`` (that is ``(..., d)``), or ``(S, ..., d)``
            with ``offsets``. Zeros when ``None``.
        offsets, reverse, cu_seqlens: as for :func:`affine_scan`.

    Returns:
        ``(h, final_state)`` with ``h`` shaped like ``b``.

    Example::

        >>> A, b = 0.5 * torch.randn(4, 10, 3, 3), torch.randn(4, 10, 3)
        >>> h, last = matrix_affine_scan(A, b)
        >>> assert torch.allclose(h[:, 1], (A[:, 1] @ h[:, 0, :, None])[..., 0] + b[:, 1], atol=1e-6)
    """
    return _ops.matrix_affine_scan(A, b, dim, initial_state, offsets, reverse)


# ---- fake kernels -------------------------------------------------------------------------


def _state_dtype(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _state_shape(b, dim, offsets, drop_last=0):
    dim = dim % (b.dim() - drop_last)
    shape = [s for i, s in enumerate(b.shape) if i != dim]
    return ([offsets.shape[0] - 1] if offsets is not None else []) + shape


def _affine_fake(a, b, dim=-1, initial_state=None, offsets=None, reverse=False, log_gates=False):
    final = b.new_empty(_state_shape(b, dim, offsets), dtype=_state_dtype(b.dtype))
    return torch.empty_like(b), final


def _matrix_fake(A, b, dim=-2, initial_state=None, offsets=None, reverse=False):
    # `dim` indexes all of b's dims, as the kernels take it; never the last (state) one.
    torch._check(-b.dim() <= dim < b.dim() - 1 and dim != -1,
                 lambda: f"dim: expected a time dimension of b other than its last (state) dimension, "
                         f"in [{-b.dim()}, {b.dim() - 2}] for b of shape {list(b.shape)}, got {dim}")
    return torch.empty_like(b), b.new_empty(_state_shape(b, dim, offsets))


def _affine_backward_fake(a, h, grad_h, grad_final, initial_state, dim, reverse, log_gates):
    grad_initial = h.new_empty(_state_shape(h, dim, None), dtype=_state_dtype(h.dtype))
    return torch.empty_like(h), torch.empty_like(h), grad_initial


def _affine_into_fake(a, b, dim, initial_state, offsets, reverse, log_gates, h):
    return _affine_fake(a, b, dim, initial_state, offsets)[1]


def _affine_backward_into_fake(a, h, grad_h, grad_final, initial_state, dim, reverse, log_gates, grad_a, grad_b):
    return _affine_backward_fake(a, h, grad_h, grad_final, initial_state, dim, reverse, log_gates)[2]


torch.library.register_fake("parprims::affine_scan")(_affine_fake)
torch.library.register_fake("parprims::_affine_scan_into")(_affine_into_fake)
torch.library.register_fake("parprims::_affine_scan_backward_into")(_affine_backward_into_fake)
torch.library.register_fake("parprims::_affine_scan_backward")(_affine_backward_fake)
torch.library.register_fake("parprims::_affine_scan_exclusive")(_affine_fake)
torch.library.register_fake("parprims::matrix_affine_scan")(_matrix_fake)
torch.library.register_fake("parprims::_matrix_affine_scan_exclusive")(_matrix_fake)


# ---- autograd -------------------------------------------------------------------------------


# Devices on which affine_scan's backward is the one-scan kernel (_affine_scan_backward);
# packed sequences keep the composed backward everywhere.
_ONE_SCAN_BACKWARD_DEVICES = ("cpu", "cuda")


def _one_scan_backward(b, offsets):
    return offsets is None and b.device.type in _ONE_SCAN_BACKWARD_DEVICES


def _affine_setup(ctx, inputs, output):
    a, b, dim, initial_state, offsets, reverse, log_gates = inputs
    ctx.dim, ctx.reverse, ctx.log_gates = dim, reverse, log_gates
    ctx.initial_dtype = None if initial_state is None else initial_state.dtype
    ctx.set_materialize_grads(False)  # grad_h and grad_final may be None (unused outputs)
    # The one-scan backward reads h_{t-1} from the forward's output.
    h = output[0] if _one_scan_backward(b, offsets) else None
    ctx.save_for_backward(a, b, initial_state, offsets, h)


def _affine_backward(ctx, grad_h, grad_final):
    a, b, initial_state, offsets, h = ctx.saved_tensors
    if grad_h is None:
        grad_h = b.new_zeros(()).expand_as(b)
    if h is not None:
        grad_a, lam, grad_initial = _ops._affine_scan_backward(a, h, grad_h, grad_final, initial_state, ctx.dim,
                                                               ctx.reverse, ctx.log_gates)
        grad_a = grad_a.sum_to_size(a.shape) if ctx.needs_input_grad[0] else None
    else:
        grad_a, lam, grad_initial = composed_backward(a, b, initial_state, offsets, grad_h, grad_final, ctx.dim,
                                                      ctx.reverse, ctx.log_gates, ctx.needs_input_grad[0])
        grad_a = None if grad_a is None else grad_a.sum_to_size(a.shape)
    grad_init = None
    if initial_state is not None and ctx.needs_input_grad[3]:
        grad_init = grad_initial.to(ctx.initial_dtype)
    return grad_a, lam, None, grad_init, None, None, None


def composed_backward(a, b, initial_state, offsets, grad_h, grad_final, dim, reverse, log_gates, need_grad_a):
    """The backward from the library's scans and elementwise ops (packed sequences, and devices
    without the one-scan backward): (the gates' gradient in b's shape, or None unless
    ``need_grad_a``; b's gradient; the initial state's gradient)."""
    gate = a.exp() if log_gates else a
    gate_c = gate.conj() if gate.is_complex() else gate
    gate_full = gate_c.expand_as(b)
    # lambda_t = grad_h_t + conj(a_{t+1}) lambda_{t+1}: the exclusive reverse scan gives the
    # second term (grad_final enters at each sequence's end) and, as its final state, the
    # gradient of the initial state.
    later, grad_initial = _ops._affine_scan_exclusive(
        gate_full, gate_full * grad_h, dim, grad_final, offsets, not reverse, False
    )
    lam = grad_h + later
    grad_a = None
    if need_grad_a:
        h_prev, _ = _ops._affine_scan_exclusive(a, b, dim, initial_state, offsets, reverse, log_gates)
        grad_a = lam * (h_prev.conj() if h_prev.is_complex() else h_prev)
        if log_gates:
            grad_a = grad_a * gate_c
    return grad_a, lam, grad_initial


torch.library.register_autograd("parprims::affine_scan", _affine_backward, setup_context=_affine_setup)


def _matrix_setup(ctx, inputs, output):
    A, b, dim, initial_state, offsets, reverse = inputs
    ctx.dim, ctx.reverse = dim, reverse
    ctx.set_materialize_grads(False)  # grad_h and grad_final may be None (unused outputs)
    ctx.save_for_backward(A, b, initial_state, offsets)


def _matrix_backward(ctx, grad_h, grad_final):
    A, b, initial_state, offsets = ctx.saved_tensors
    dim, reverse = ctx.dim, ctx.reverse
    if grad_h is None:
        grad_h = torch.zeros_like(b)
    lead = b.shape[:-1]
    At = A.transpose(-1, -2).expand(*lead, A.shape[-1], A.shape[-1])
    # lambda_t = gh_t + A_{t+1}^T lambda_{t+1}, through gates A^T (a strided view, not a copy).
    later, grad_initial = _ops._matrix_affine_scan_exclusive(
        At, (At @ grad_h.unsqueeze(-1)).squeeze(-1), dim, grad_final, offsets, not reverse
    )
    lam = grad_h + later
    grad_A = None
    if ctx.needs_input_grad[0]:
        h_prev, _ = _ops._matrix_affine_scan_exclusive(A, b, dim, initial_state, offsets, reverse)
        grad_A = (lam.unsqueeze(-1) * h_prev.unsqueeze(-2)).sum_to_size(A.shape)
    grad_init = grad_initial if (initial_state is not None and ctx.needs_input_grad[3]) else None
    return grad_A, lam, None, grad_init, None, None


torch.library.register_autograd("parprims::matrix_affine_scan", _matrix_backward, setup_context=_matrix_setup)
