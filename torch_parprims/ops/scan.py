"""Scans and segmented scans: wrappers, fake kernels and autograd."""
from typing import Optional

import torch

from . import _args

_ops = torch.ops.parprims
OPS = ("add", "mul", "max", "min", "logaddexp")


def scan(x: torch.Tensor, dim: int, op: str = "add", exclusive: bool = False, reverse: bool = False) -> torch.Tensor:
    """Prefix scan of ``op`` along ``dim``.

    ``y[..., t, ...] = x[..., 0, ...] ∘ x[..., 1, ...] ∘ ... ∘ x[..., t, ...]`` with ``∘`` one of
    ``add``, ``mul``, ``max``, ``min``, ``logaddexp`` (``log(exp(a) + exp(b))``).

    Args:
        x: a tensor of any shape (strided views are read in place). float16, bfloat16,
            float32, float64 for every op (half types compute in float32; on the CPU, add, mul
            and logaddexp of float32 and complex64 accumulate in double, as torch.cumsum does);
            int32, int64 and bool for add, max, min; complex64 and complex128 for add.
        dim: the dimension to scan.
        op: the operator.
        exclusive: output ``t`` excludes ``x[t]``; the first output is the identity
            (0, 1, -inf, +inf, -inf; for integers the type's min/max; bool False/True).
        reverse: scan from the end (flip, scan, flip).

    Returns:
        A tensor shaped like ``x``; int64 for add over integers and bool (as ``torch.cumsum``),
        ``x``'s dtype otherwise. NaN propagates, for max and min too.

    Example::

        >>> x = torch.tensor([3., 1., 4., 2.])
        >>> scan(x, 0)
        tensor([ 3.,  4.,  8., 10.])
        >>> assert torch.equal(scan(x, 0, "max", exclusive=True), torch.tensor([-float("inf"), 3., 3., 4.]))
    """
    x = _args.expect_tensor("x", x)
    return _ops.scan(x, dim, op, exclusive, reverse)


@_args.takes_offsets("x")
def segmented_scan(
    x: torch.Tensor,
    offsets: torch.Tensor,
    dim: int = 0,
    op: str = "add",
    exclusive: bool = False,
    reverse: bool = False,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Scan along ``dim`` restarting at every packed-sequence start.

    ``x`` holds S sequences concatenated along ``dim``; sequence ``k`` covers
    ``[offsets[k], offsets[k+1])``. Each is scanned as :func:`scan` would scan it alone.

    Args:
        x: the packed data, e.g. ``(total_tokens,)`` or ``(total_tokens, channels)``.
        offsets: 1-D int32/int64 tensor of length S+1 on ``x``'s device: ``offsets[0] == 0``,
            non-decreasing, ``offsets[-1] == x.size(dim)`` (flash-attn's ``cu_seqlens``).
            Empty sequences are allowed.
        dim, op, exclusive, reverse: as for :func:`scan`.
        cu_seqlens: a keyword alias of ``offsets`` (flash-attn's name); give one of the two.

    Example::

        >>> x = torch.tensor([2., 1., 3., 4., 5.])
        >>> offsets = torch.tensor([0, 2, 5])
        >>> y = segmented_scan(x, offsets)
        >>> assert torch.equal(y, torch.cat([x[:2].cumsum(0), x[2:].cumsum(0)]))
        >>> assert torch.equal(segmented_scan(x, cu_seqlens=offsets), y)
    """
    # cu_seqlens arrives as offsets (see _args.takes_offsets).
    return _ops.segmented_scan(x, offsets, dim, op, exclusive, reverse)


# ---- fake kernels -------------------------------------------------------------------------


def _out_dtype(x, op):
    if op == "add" and (not x.dtype.is_floating_point and not x.dtype.is_complex):
        return torch.int64
    return x.dtype


@torch.library.register_fake("parprims::scan")
def _scan_fake(x, dim, op="add", exclusive=False, reverse=False):
    return torch.empty_like(x, dtype=_out_dtype(x, op))


@torch.library.register_fake("parprims::segmented_scan")
def _segmented_scan_fake(x, offsets, dim=0, op="add", exclusive=False, reverse=False):
    return torch.empty_like(x, dtype=_out_dtype(x, op))


@torch.library.register_fake("parprims::_scan_with_indices")
def _scan_with_indices_fake(x, offsets, dim, op, exclusive=False, reverse=False):
    return torch.empty_like(x), torch.empty_like(x, dtype=torch.int64)


@torch.library.register_fake("parprims::_scan_extreme_backward")
def _scan_extreme_backward_fake(grad, out, offsets, dim, exclusive, reverse):
    return torch.empty_like(out)


@torch.library.register_fake("parprims::_scan_bicyclic")
def _scan_bicyclic_fake(p, q, offsets, dim, exclusive=False, reverse=False):
    return torch.empty_like(p), torch.empty_like(q)


# ---- autograd -------------------------------------------------------------------------------


def scan_backward(grad, x, y, offsets, dim, op, exclusive, reverse):
    """Gradient of a (segmented) scan with respect to its input, through library ops only."""

    def rscan(t, rop, excl):  # the scan in the opposite direction, same segments
        if offsets is None:
            return _ops.scan(t, dim, rop, excl, not reverse)
        return _ops.segmented_scan(t, offsets, dim, rop, excl, not reverse)

    if op == "add":
        return rscan(grad, "add", exclusive)
    if op in ("max", "min"):
        # One scan over the runs of equal outputs (csrc/core/extreme_grad_problem.h), from y
        # alone; half types sum in float32 inside it.
        return _ops._scan_extreme_backward(grad, y, offsets, dim, exclusive, reverse)
    if x.dtype in (torch.float16, torch.bfloat16):
        # Half inputs: the backward computes in float32, as the forward does. Max/min accumulate
        # their scattered gradients in float32; logaddexp needs the float32 output, not the saved
        # half one, whose rounding (up to 2^-9 relative in bfloat16) every exp(x - y) would carry.
        x32 = x.float()
        if op == "logaddexp":
            y = _ops.scan(x32, dim, op, exclusive, reverse) if offsets is None else \
                _ops.segmented_scan(x32, offsets, dim, op, exclusive, reverse)
        return scan_backward(grad.float(), x32, y, offsets, dim, op, exclusive, reverse).to(x.dtype)
    if op == "mul":
        # dx_s = (prod of the x before s) * (sum over later outputs t of g_t * prod of x in (s, t]):
        # the second factor is a reverse affine scan with gates x, so zeros in x are exact.
        before = _ops.scan(x, dim, "mul", True, reverse) if offsets is None else \
            _ops.segmented_scan(x, offsets, dim, "mul", True, reverse)
        if exclusive:
            later, _ = _ops._affine_scan_exclusive(x, grad, dim, None, offsets, not reverse, False)
            return before * later
        later, _ = _ops._affine_scan_exclusive(x, x * grad, dim, None, offsets, not reverse, False)
        return before * (grad + later)
    if op == "logaddexp":
        if not torch.is_grad_enabled():
            return _logaddexp_backward(grad, x, y, offsets, dim, exclusive, reverse)
        # A double backward (create_graph=True) differentiates this composition of the library's
        # scans: dx_s = sum_t g_t exp(x_s - y_t), split by the sign of g so that every term
        # stays in log space. (The affine scan of _logaddexp_backward has no derivative.)
        log_g = torch.log(grad.abs()) - y
        neg_inf = torch.full_like(log_g, float("-inf"))
        pos = rscan(torch.where(grad > 0, log_g, neg_inf), "logaddexp", exclusive)
        neg = rscan(torch.where(grad < 0, log_g, neg_inf), "logaddexp", exclusive)
        return torch.exp(x + pos) - torch.exp(x + neg)
    raise ValueError(f"op: unknown scan op {op!r}")


def _logaddexp_backward(grad, x, y, offsets, dim, exclusive, reverse):
    """logaddexp's gradient dx_s = sum over the outputs t from s on (after s, when exclusive) of
    g_t exp(x_s - y_t), in one reverse affine scan whose gates lie in [0, 1].

    With z the inclusive output (y, or logaddexp(y, x) when exclusive), p_s = exp(x_s - z_s) is
    x_s's share of z_s and exp(z_{s-1} - z_s) = 1 - p_s the share of the steps before it, so the
    sum is a recurrence against the scan order. Inclusive: dx_s = p_s (g_s + E_s), E the
    exclusive reverse scan of the maps h -> (1 - p_t)(h + g_t); exclusive: dx_s = p_s E_s, E that
    of h -> (1 - p_t) h + g_t. 1 - p comes as -expm1(x - y), or exp(y - z): exact where p is
    close to 1. (The log-space composition, two logaddexp scans and a dozen elementwise passes,
    took 1.2 ms at (12288, 2048) float32 on an H100.)
    """
    if x.dim() == 0:  # (a scalar scans as one step; the affine scan wants a dimension)
        one = lambda t: t.reshape(1)
        return _logaddexp_backward(one(grad), one(x), one(y), offsets, 0, exclusive, reverse).reshape(())

    def later(gate, b):
        return _ops._affine_scan_exclusive(gate, b, dim, None, offsets, not reverse, False)[0]

    if exclusive:
        z = torch.logaddexp(y, x)
        return later(torch.exp(y - z), grad).mul_(torch.exp(x - z))
    d = x - y
    rest = torch.expm1(d).neg_()
    return later(rest, rest * grad).add_(grad).mul_(d.exp_())


def _setup(ctx, x, y, offsets, dim, op, exclusive, reverse):
    ctx.dim, ctx.op, ctx.exclusive, ctx.reverse = dim, op, exclusive, reverse
    # Max/min need only the output (the runs of equal values tell the sources apart).
    keep_x = op in ("mul", "logaddexp")
    keep_y = op in ("logaddexp", "max", "min")
    ctx.save_for_backward(x if keep_x else None, y if keep_y else None, offsets)


# `inputs` holds every argument of the schema, defaults filled in.
def _scan_setup_context(ctx, inputs, output):
    x, dim, op, exclusive, reverse = inputs
    _setup(ctx, x, output, None, dim, op, exclusive, reverse)


def _segmented_setup_context(ctx, inputs, output):
    x, offsets, dim, op, exclusive, reverse = inputs
    _setup(ctx, x, output, offsets, dim, op, exclusive, reverse)


def _backward(ctx, grad):
    x, y, offsets = ctx.saved_tensors
    return scan_backward(grad, x, y, offsets, ctx.dim, ctx.op, ctx.exclusive, ctx.reverse)


def _scan_backward(ctx, grad):
    return _backward(ctx, grad), None, None, None, None


def _segmented_backward(ctx, grad):
    return _backward(ctx, grad), None, None, None, None, None


torch.library.register_autograd("parprims::scan", _scan_backward, setup_context=_scan_setup_context)
torch.library.register_autograd(
    "parprims::segmented_scan", _segmented_backward, setup_context=_segmented_setup_context
)


def _with_indices_setup_context(ctx, inputs, output):
    x, offsets, dim, _op, exclusive, reverse = inputs
    values, index = output
    ctx.mark_non_differentiable(index)
    ctx.exclusive, ctx.reverse = exclusive, reverse
    ctx.set_materialize_grads(False)  # no int64 zeros of the input's size for the index's gradient
    ctx.dim = dim
    ctx.save_for_backward(values, offsets)


def _with_indices_backward(ctx, grad_values, _grad_index):
    values, offsets = ctx.saved_tensors
    if grad_values is None:
        return None, None, None, None, None, None
    grad = _ops._scan_extreme_backward(grad_values, values, offsets, ctx.dim, ctx.exclusive, ctx.reverse)
    return grad, None, None, None, None, None


torch.library.register_autograd(
    "parprims::_scan_with_indices", _with_indices_backward, setup_context=_with_indices_setup_context
)


def _not_differentiable(name):
    """Autograd for internal ops that the backwards use: they are not differentiated again."""

    def backward(ctx, *grads):
        raise RuntimeError(
            f"torch_parprims: {name} is an internal op of a backward and has no gradient itself "
            "(double backward through mul scans and affine scans is not supported)"
        )

    return backward


def _no_context(ctx, inputs, output):
    pass


def _sequence_firsts(offsets, n, reverse, device):
    """Whether each position along the dim is a sequence's first step in scan order (the row's
    first without offsets), in scan order. Empty sequences mark where a neighbour starts anyway,
    or a slot outside the dim (dropped)."""
    if offsets is None:
        return torch.arange(n, device=device) == 0
    # Physical positions, as csrc/host/scan_host.cpp's sequence_starts: n and -1 land in a spare slot.
    marks = torch.zeros(n + 1, dtype=torch.bool, device=device)
    first = (offsets[1:] - 1) % (n + 1) if reverse else offsets[:-1]
    marks.index_fill_(0, first.long(), True)
    return marks[:n].flip(0) if reverse else marks[:n]


def gather_from_sources(v, out, offsets, dim, exclusive, reverse):
    """What each output of a max/min scan reads from ``v`` at the position it came from (zero
    for an exclusive scan's identity): the forward's Jacobian applied to ``v``, which is the
    derivative of ``_scan_extreme_backward`` with respect to its gradient. The sources are
    told apart from ``out`` alone, as there: a run of equal outputs (NaN equal to NaN) starts at
    a sequence's first step and wherever the value changes."""
    if out.dim() == 0:
        return gather_from_sources(v.reshape(1), out.reshape(1), offsets, 0, exclusive, reverse).reshape(())
    o, w = out.movedim(dim, -1), v.movedim(dim, -1)
    if reverse:  # walk in scan order
        o, w = o.flip(-1), w.flip(-1)
    n = o.size(-1)
    firsts = _sequence_firsts(offsets, n, reverse, o.device)
    starts = firsts.expand_as(o).clone()
    starts[..., 1:] |= ~((o[..., 1:] == o[..., :-1]) | (o[..., 1:].isnan() & o[..., :-1].isnan()))
    if exclusive:
        # Output t holds step t - 1's value: the step after a sequence's first starts a run,
        # whose source is one step back; a first step's output is the identity.
        starts[..., 1:] |= firsts[:-1]
    step = torch.arange(n, device=o.device).expand_as(o)
    source = _ops.scan(torch.where(starts, step, 0), -1, "max", False, False) - int(exclusive)
    result = w.gather(-1, source.clamp(min=0))
    if exclusive:
        result = torch.where(firsts, 0, result)
    if reverse:
        result = result.flip(-1)
    return result.movedim(-1, dim)


def _extreme_backward_setup_context(ctx, inputs, output):
    _grad, out, offsets, dim, exclusive, reverse = inputs
    ctx.dim, ctx.exclusive, ctx.reverse = dim, exclusive, reverse
    ctx.save_for_backward(out, offsets)


def _extreme_backward_backward(ctx, grad_grad_in):
    # Linear in the gradient; the outputs' values only pick the runs (no gradient through them).
    out, offsets = ctx.saved_tensors
    grad = gather_from_sources(grad_grad_in, out, offsets, ctx.dim, ctx.exclusive, ctx.reverse)
    return grad, None, None, None, None, None


torch.library.register_autograd(
    "parprims::_scan_extreme_backward", _extreme_backward_backward, setup_context=_extreme_backward_setup_context
)

for _name in ("_affine_scan_exclusive", "_matrix_affine_scan_exclusive"):
    torch.library.register_autograd(f"parprims::{_name}", _not_differentiable(_name), setup_context=_no_context)
