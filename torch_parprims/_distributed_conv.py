"""The causal convolution with the time dimension split across the ranks of a process group
(``torch_parprims.distributed.causal_conv1d``), and where a rank's slice starts."""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ._collectives import all_gather as _all_gather
from ._collectives import local_cu_seqlens


def slice_start(length: int, group=None, device=None) -> torch.Tensor:
    """Where this rank's slice starts in the whole sequence: the sum of the lengths of the
    slices of the ranks before it (one all-gather of one integer per rank), as a 0-d int64
    tensor on ``device`` (no host synchronization)."""
    import torch.distributed as dist

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    lengths = _all_gather(torch.tensor([length], dtype=torch.int64, device=device), world, group)[:, 0]
    return lengths[:rank].sum()


class _GatherWithGrad(torch.autograd.Function):
    """Every rank's tensor, ``(world, *shape)``; the backward sums the gradients that every rank
    sends each slot (one all-reduce) and hands each rank its own."""

    @staticmethod
    def forward(ctx, tensor, world, group):
        import torch.distributed as dist

        ctx.group, ctx.rank = group, dist.get_rank(group)
        return _all_gather(tensor, world, group)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        import torch.distributed as dist

        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad[ctx.rank], None, None


def _halo(x: torch.Tensor, width: int, group) -> Tuple[torch.Tensor, torch.Tensor]:
    """The ``width`` positions before this rank's slice of ``x`` (batch, channels, L): zeros
    before the sequence's start, taken from as many earlier ranks as it needs (a slice may be
    shorter than ``width``, or empty). Differentiable. Also returns the slice's start."""
    import torch.distributed as dist

    world, rank = dist.get_world_size(group), dist.get_rank(group)
    length = x.shape[-1]
    # Every rank's last `width` positions (zeros on the left of a shorter slice) and length.
    tails = _GatherWithGrad.apply(F.pad(x, (width - length, 0)) if length < width else x[..., length - width:],
                                  world, group)  # (world, batch, channels, width)
    lengths = _all_gather(torch.tensor([length], dtype=torch.int64, device=x.device), world, group)[:, 0]
    ends = lengths.cumsum(0)
    start = ends[rank] - lengths[rank]
    # Global position p (start - width <= p < start) is in the slice of the first rank ending
    # after p, at place p - (end - width) of its tail.
    positions = start - width + torch.arange(width, device=x.device)
    owner = torch.searchsorted(ends, positions, right=True).clamp(max=world - 1)
    place = (positions - (ends[owner] - width)).clamp(0, width - 1)
    halo = tails[owner, :, :, place]  # (width, batch, channels)
    halo = halo * (positions >= 0).to(halo.dtype)[:, None, None]
    return halo.permute(1, 2, 0), start


def causal_conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    cu_seqlens: Optional[torch.Tensor] = None,
    activation: Optional[str] = None,
    group=None,
) -> torch.Tensor:
    """:func:`torch_parprims.nn.causal_conv1d` with the time dimension split across ``group``.

    ``x`` is this rank's slice ``(batch, channels, L)`` (any length, empty included); the output
    is the slice of what one process computes on the whole sequence. The taps that reach before
    the slice read the ``width - 1`` positions before it from the ranks that hold them (one
    all-gather of every rank's last ``width - 1`` positions; the gradient goes back the same
    way). ``cu_seqlens``: the *global* offsets of packed sequences (batch 1), the same on every
    rank; a sequence that starts in this slice does not see the positions before it.
    """
    width = weight.shape[-1]
    if width == 1:  # no tap reaches another position
        return _conv(x, weight, bias, None, activation)
    halo, start = _halo(x, width - 1, group)
    extended = torch.cat([halo.to(x.dtype), x], dim=-1)
    offsets = None
    if cu_seqlens is not None:
        # The global offsets as the extended slice sees them, with a leading 0: positions of the
        # halo before the first sequence form one more (discarded) sequence.
        inside = local_cu_seqlens(cu_seqlens.to(torch.int64), start - (width - 1), extended.shape[-1])
        offsets = torch.cat([inside.new_zeros(1), inside])
    return _conv(extended, weight, bias, offsets, activation)[..., width - 1:]


def _conv(x, weight, bias, offsets, activation):
    from .nn.conv import causal_conv1d as local_conv

    return local_conv(x, weight, bias, offsets, activation)
