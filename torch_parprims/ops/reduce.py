"""Reductions and histograms: wrappers, fake kernels and autograd.

``segment_reduce`` and ``reduce`` run on the scan engines (a reduction is a scan's aggregate at
each segment's last element); ``histogram`` has its own kernels. None of them synchronizes with
the host.
"""
import numbers
from typing import Optional, Sequence

import torch

from . import _args

_ops = torch.ops.parprims
OPS = ("sum", "mean", "max", "min", "prod", "logsumexp")


@_args.takes_offsets("x")
def segment_reduce(
    x: torch.Tensor,
    offsets: torch.Tensor,
    op: str,
    dim: int = 0,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """One reduction per packed sequence along ``dim``.

    ``x`` holds S sequences concatenated along ``dim``; sequence ``k`` covers
    ``[offsets[k], offsets[k+1])`` and gives output ``k`` along ``dim``. Any other dims are
    kept: ``x`` of shape ``(T, *F)`` gives ``(S, *F)``.

    Args:
        x: the packed data (strided views are read in place). float16, bfloat16, float32,
            float64 for every op (half types compute in float32; on the CPU, sum, mean, prod
            and logsumexp of float32 accumulate in float64, as torch.sum does); int32, int64
            and bool for sum, max, min, prod.
        offsets: 1-D int32/int64 tensor of length S+1 on ``x``'s device (flash-attn's
            ``cu_seqlens``): ``offsets[0] == 0``, non-decreasing, ``offsets[-1] == x.size(dim)``.
            Strided views are accepted; empty sequences are allowed.
        op: ``sum``, ``mean``, ``max``, ``min``, ``prod`` or ``logsumexp``.
        dim: the packed dimension.
        cu_seqlens: a keyword alias of ``offsets``; give one of the two.

    Returns:
        ``x``'s shape with ``dim`` of size S. An empty sequence gives the op's identity: 0 for
        sum and mean, 1 for prod, -inf (integers: the type's minimum) for max and logsumexp,
        +inf (integers: maximum) for min. int64 for sum and prod over integers and bool, ``x``'s
        dtype otherwise. NaN propagates, through max and min too.

    Gradients (floating ``x``): max and min send the gradient to the first element equal to
    the result in each sequence (ties go to the first); prod is exact with zeros (products of
    the elements before and after, no division); logsumexp's is softmax-weighted.

    Example::

        >>> x = torch.tensor([1., 5., 2., 4., 3.])
        >>> offsets = torch.tensor([0, 2, 2, 5])
        >>> segment_reduce(x, offsets, "sum")
        tensor([6., 0., 9.])
        >>> assert segment_reduce(x, offsets, "max").tolist() == [5.0, float("-inf"), 4.0]
    """
    # cu_seqlens arrives as offsets (see _args.takes_offsets).
    return _ops.segment_reduce(x, offsets, op, dim)


def reduce(
    x: torch.Tensor, dim: int, op: str, mask: Optional[torch.Tensor] = None, keepdim: bool = False
) -> torch.Tensor:
    """A reduction along ``dim``, optionally over the elements where ``mask`` is True only.

    Masked mean pooling over a padded batch: ``reduce(h, 1, "mean", mask=attention_mask[..., None])``
    for ``h`` of shape ``(B, L, D)`` and a ``(B, L)`` bool mask.

    Args:
        x: a tensor of any shape (strided views are read in place); dtypes as for
            :func:`segment_reduce`.
        dim: the dimension to reduce.
        op: ``sum``, ``mean``, ``max``, ``min``, ``prod`` or ``logsumexp``.
        mask: a torch.bool tensor broadcastable to ``x``; masked-out elements are left out
            (NaN there does not propagate). Not differentiable.
        keepdim: keep ``dim`` with size 1.

    Returns:
        ``x``'s shape without ``dim`` (or with size 1 there). A slice with no element (an empty
        ``dim`` or everything masked) gives the op's identity (mean: 0), as in
        :func:`segment_reduce`; dtypes and gradients as there.

    Example::

        >>> h = torch.tensor([[1., 2., 9.], [3., 5., 7.]])
        >>> mask = torch.tensor([[True, True, False], [True, True, True]])
        >>> reduce(h, 1, "mean", mask=mask)
        tensor([1.5000, 5.0000])
        >>> reduce(h, 0, "max", keepdim=True)
        tensor([[3., 5., 9.]])
    """
    _args.expect_tensor("x", x)
    if mask is not None:
        _args.expect_tensor("mask", mask)
    return _ops.reduce(x, dim, op, mask, _args.expect_bool("keepdim", keepdim))


@_args.takes_offsets("x")
def histogram(
    x: torch.Tensor,
    bins: int,
    range: Sequence[float],
    weights: Optional[torch.Tensor] = None,
    offsets: Optional[torch.Tensor] = None,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Histogram with ``bins`` equal-width bins over ``range = (lo, hi)``, exact at any count.

    A value ``v`` in ``[lo, hi]`` goes to bin ``floor((v - lo) * bins / (hi - lo))`` computed
    in float32 (float64 for float64 ``x``), as ``torch.histc`` does; ``hi`` itself goes to the
    last bin. Values outside the range and NaN are left out. The range is given, never read
    from the data, so there is no host synchronization.

    Args:
        x: floating values (float16, bfloat16, float32, float64), any shape (flattened); 1-D
            packed sequences with ``offsets``.
        bins: the number of bins (positive).
        range: ``(lo, hi)``, finite, ``lo < hi``.
        weights: optional floating tensor of ``x``'s shape: each value adds its weight
            instead of 1. The sums accumulate in float32 (float64 for float64 weights); on CUDA
            their order is not fixed, so the rounding may differ between runs (and
            ``torch.use_deterministic_algorithms(True)`` raises, as for ``index_add_``).
        offsets: optional 1-D int32/int64 sequence boundaries (as in :func:`segment_reduce`):
            one histogram per sequence.
        cu_seqlens: a keyword alias of ``offsets``.

    Returns:
        ``(bins,)``, or ``(S, bins)`` with offsets: int64 counts (exact past 2^24 per bin,
        unlike float32 ``torch.histc``), or weight sums in float32 (float64 for float64
        weights). Differentiable with respect to ``weights``.

    Example::

        >>> x = torch.tensor([0.0, 0.2, 0.5, 1.0, 1.5, float("nan")])
        >>> histogram(x, 2, (0.0, 1.0))
        tensor([2, 2])
        >>> histogram(x, 2, (0.0, 1.0), offsets=torch.tensor([0, 2, 6])).tolist()
        [[2, 0], [0, 2]]
    """
    _args.expect_tensor("x", x)
    if isinstance(bins, bool) or not isinstance(bins, numbers.Integral):
        raise TypeError(f"bins: expected an int, got {_args._type_name(bins)}")
    lo, hi = _range_of(range)
    if weights is not None:
        _args.expect_tensor("weights", weights)
    return _ops.histogram(x, int(bins), lo, hi, weights, offsets)


def _range_of(value):
    """``(lo, hi)`` as floats, or a TypeError naming ``range``."""
    try:
        lo, hi = value
        return float(lo), float(hi)
    except (TypeError, ValueError):
        raise TypeError(f"range: expected a pair of numbers (lo, hi), got {value!r}") from None


# ---- fake kernels -------------------------------------------------------------------------


def _output_dtype(x, op):
    if op in ("sum", "prod") and not (x.dtype.is_floating_point or x.dtype.is_complex):
        return torch.int64
    return x.dtype


def _wrap(dim, ndim):
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"dim: expected a dimension in [{-n}, {n - 1}] for a tensor of {ndim} dimensions, got {dim}")
    return dim % n


@torch.library.register_fake("parprims::segment_reduce")
def _segment_reduce_fake(x, offsets, op, dim=0):
    d = _wrap(dim, x.dim())
    shape = list(x.shape)
    shape[d] = offsets.shape[0] - 1
    return x.new_empty(shape, dtype=_output_dtype(x, op))


@torch.library.register_fake("parprims::reduce")
def _reduce_fake(x, dim, op, mask=None, keepdim=False):
    d = _wrap(dim, x.dim())
    shape = list(x.shape)
    if x.dim() > 0:
        if keepdim:
            shape[d] = 1
        else:
            del shape[d]
    return x.new_empty(shape, dtype=_output_dtype(x, op))


@torch.library.register_fake("parprims::histogram")
def _histogram_fake(x, bins, lo, hi, weights=None, offsets=None):
    dtype = torch.int64 if weights is None else (torch.float64 if weights.dtype == torch.float64 else torch.float32)
    shape = (bins,) if offsets is None else (offsets.shape[0] - 1, bins)
    return x.new_empty(shape, dtype=dtype)


@torch.library.register_fake("parprims::_histogram_bin_index")
def _histogram_bin_index_fake(x, bins, lo, hi, offsets=None):
    return x.new_empty(x.shape, dtype=torch.int64)


# ---- autograd -------------------------------------------------------------------------------

_LAST = torch.iinfo(torch.int64).max  # min's identity over int64 positions: "no position"


def _reduction_grad(op, grad, x, y, spread, reduce_again, mul_scan, positions, mask, count):
    """The gradient of a reduction with respect to ``x``, through library ops.

    ``grad`` and ``y`` have one entry per output along the reduced dim (keepdim-shaped);
    ``spread`` takes such a tensor to ``x``'s positions; ``reduce_again(t, op)`` reduces a
    tensor of ``x``'s shape the same way (keepdim-shaped); ``mul_scan(t, exclusive, reverse)``
    is the matching (segmented) product scan; ``positions`` the int64 position of every element
    along the dim (broadcastable to ``x``); ``mask`` (or None) the elements taking part;
    ``count`` (mean) the number of elements per output, broadcastable to ``grad``.
    """
    if op == "sum":
        g = spread(grad)
    elif op == "mean":
        g = spread(grad / count)
    elif op in ("max", "min"):
        ys = spread(y)
        hit = (x == ys) | (x.isnan() & ys.isnan())
        if mask is not None:
            hit = hit & mask
        # The first position equal to the result: a min over positions (ties to the first).
        first = reduce_again(torch.where(hit, positions, _LAST), "min")
        g = torch.where(positions == spread(first), spread(grad), 0)
    elif op == "prod":
        # d/dx_i prod = (product before i) * (product after i): exact with zeros.
        xm = x if mask is None else torch.where(mask, x, 1)
        g = spread(grad) * mul_scan(xm, True, False) * mul_scan(xm, True, True)
    elif op == "logsumexp":
        ys = spread(y)
        # softmax weights; an all -inf (or empty) output has no mass to give back.
        g = spread(grad) * torch.where(ys == float("-inf"), 0, torch.exp(x - ys))
    else:
        raise ValueError(f"op: unknown reduction {op!r}")
    if mask is not None:
        g = torch.where(mask, g, 0)
    return g


def _float_for_backward(x, y, op, recompute):
    """Half inputs differentiate in float32 (as the forward computes); logsumexp's output is
    recomputed in float32 rather than read from its rounded half copy."""
    if x.dtype not in (torch.float16, torch.bfloat16):
        return x, y
    return x.float(), recompute(x.float()) if op == "logsumexp" else y.float()


def _segment_setup(ctx, inputs, output):
    x, offsets, op, dim = inputs
    ctx.op, ctx.dim = op, dim
    ctx.save_for_backward(x, output, offsets)


def _segment_backward(ctx, grad):
    x, y, offsets = ctx.saved_tensors
    op, dim = ctx.op, ctx.dim % x.dim()
    xf, yf = _float_for_backward(x, y, op, lambda t: _ops.segment_reduce(t, offsets, op, dim))
    length = x.shape[dim]
    ids = _ops.segment_ids_from_offsets(offsets, length)
    shape = [1] * x.dim()
    shape[dim] = -1
    count = None
    if op == "mean":
        count = _ops.lengths_from_offsets(offsets).clamp(min=1).view(shape).to(xf.dtype)
    dx = _reduction_grad(
        op,
        grad.to(xf.dtype),
        xf,
        yf,
        spread=lambda t: t.index_select(dim, ids),
        reduce_again=lambda t, rop: _ops.segment_reduce(t, offsets, rop, dim),
        mul_scan=lambda t, exclusive, reverse: _ops.segmented_scan(t, offsets, dim, "mul", exclusive, reverse),
        positions=torch.arange(length, device=x.device).view(shape),
        mask=None,
        count=count,
    )
    return dx.to(x.dtype), None, None, None


def _reduce_setup(ctx, inputs, output):
    x, dim, op, mask, keepdim = inputs
    ctx.op, ctx.dim, ctx.keepdim = op, dim, keepdim
    ctx.save_for_backward(x, output, mask)


def _reduce_backward(ctx, grad):
    x, y, mask = ctx.saved_tensors
    op = ctx.op
    x0 = x
    if x.dim() == 0:  # a 0-d x reduces as a 1-element vector
        x, y, grad = x.reshape(1), y.reshape(1), grad.reshape(1)
        mask = None if mask is None else mask.reshape(1)
        dim, keepdim = 0, True
    else:
        dim, keepdim = ctx.dim % x.dim(), ctx.keepdim
    if not keepdim:
        y, grad = y.unsqueeze(dim), grad.unsqueeze(dim)
    if mask is not None:
        mask = mask.expand(x.shape)
    xf, yf = _float_for_backward(x, y, op, lambda t: _ops.reduce(t, dim, op, mask, True))
    count = None
    if op == "mean":
        count = x.shape[dim] if mask is None else _ops.reduce(mask, dim, "sum", None, True)
        count = torch.as_tensor(count, device=x.device).clamp(min=1).to(xf.dtype)
    shape = [1] * x.dim()
    shape[dim] = -1
    dx = _reduction_grad(
        op,
        grad.to(xf.dtype),
        xf,
        yf,
        spread=lambda t: t.expand(x.shape),
        reduce_again=lambda t, rop: _ops.reduce(t, dim, rop, None, True),
        mul_scan=lambda t, exclusive, reverse: _ops.scan(t, dim, "mul", exclusive, reverse),
        positions=torch.arange(x.shape[dim], device=x.device).view(shape),
        mask=mask,
        count=count,
    )
    return dx.to(x0.dtype).reshape(x0.shape), None, None, None, None


def _histogram_setup(ctx, inputs, output):
    x, bins, lo, hi, weights, offsets = inputs
    ctx.args = (bins, lo, hi)
    ctx.weights_dtype = None if weights is None else weights.dtype
    ctx.save_for_backward(x, offsets)


def _histogram_backward(ctx, grad):
    x, offsets = ctx.saved_tensors
    dweights = None
    if ctx.needs_input_grad[4]:
        # Each weight's gradient is the gradient of the bin it was added to (0 if skipped).
        index = _ops._histogram_bin_index(x, *ctx.args, offsets)
        taken = grad.reshape(-1).index_select(0, index.reshape(-1).clamp(min=0)).view(x.shape)
        dweights = torch.where(index >= 0, taken, 0).to(ctx.weights_dtype)
    return None, None, None, None, dweights, None


torch.library.register_autograd("parprims::segment_reduce", _segment_backward, setup_context=_segment_setup)
torch.library.register_autograd("parprims::reduce", _reduce_backward, setup_context=_reduce_setup)
torch.library.register_autograd("parprims::histogram", _histogram_backward, setup_context=_histogram_setup)
