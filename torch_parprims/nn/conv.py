"""Depthwise causal convolution along time (Mamba's short convolution), over packed sequences.

Built from PyTorch ops, with no loop over sequences and no host synchronization: one
``F.conv1d`` over the whole packed batch, then a correction of the few outputs whose taps reach
back across a sequence start. Only the first ``width - 1`` tokens of each sequence have such
taps, so the correction touches ``S * (width - 1)`` tokens however long the batch is. Autograd
and ``torch.compile`` come from the PyTorch ops it is made of.
"""
from typing import Optional

import torch
import torch.nn.functional as F

from ..ops import _args

Tensor = torch.Tensor

_ACTIVATIONS = (None, "silu", "swish")


def _check_args(x: Tensor, weight: Tensor, bias: Optional[Tensor], offsets: Optional[Tensor], activation) -> None:
    """Shape, dtype and device checks that need no device values (no sync, compile-friendly)."""
    if x.dim() != 3:
        raise ValueError(f"x: expected a (batch, channels, L) tensor, got shape {tuple(x.shape)}")
    channels = x.shape[1]
    if weight.dim() != 2 or weight.shape[0] != channels or weight.shape[1] < 1:
        raise ValueError(f"weight: expected shape ({channels}, width) with width >= 1, got {tuple(weight.shape)}")
    if bias is not None and tuple(bias.shape) != (channels,):
        raise ValueError(f"bias: expected shape ({channels},), got {tuple(bias.shape)}")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation: expected one of None, 'silu', 'swish', got {activation!r}")
    if offsets is None:
        return
    if offsets.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"offsets: expected an int32 or int64 tensor, got {offsets.dtype}")
    if offsets.dim() != 1 or offsets.numel() < 1:
        raise ValueError(f"offsets: expected a 1-D tensor of length num_sequences + 1, got shape {tuple(offsets.shape)}")
    if offsets.device != x.device:
        raise ValueError(f"offsets: expected a tensor on {x.device} (the data's device), got {offsets.device}")
    if x.shape[0] != 1:
        raise ValueError(f"x: packed sequences (offsets given) need batch 1, got batch {x.shape[0]}")


def _validate_offset_values(offsets: Tensor, length: int) -> None:
    """offsets[0] == 0, non-decreasing, offsets[-1] == length: checked where it costs no sync.

    As the library's ops do: always for CPU offsets, for CUDA ones only when
    ``torch_parprims.set_checks(True)``. Under ``torch.compile`` the values are not known at
    trace time, so they are not checked there; bad values then give wrong numbers near the
    sequence starts, never an out-of-bounds access (every index below is clamped).
    """
    if torch.compiler.is_compiling():
        return
    if offsets.is_cpu or torch.ops.parprims._checks_enabled():
        torch.ops.parprims.check_offsets(offsets, length)


def _cross_sequence_taps(x: Tensor, weight: Tensor, offsets: Tensor) -> tuple:
    """What a plain causal convolution over the packed batch wrongly adds at sequence starts.

    Returns ``(positions, amounts)``: ``amounts[..., i]`` is the sum of the taps of the output
    at ``positions[i]`` that read tokens of an earlier sequence (or before the batch). Token j
    of a sequence (j < width - 1) reads k tokens back for k = 1 .. width - 1; the taps with
    k > j cross its start. Tokens beyond a short sequence's end get amount 0 (their position is
    clamped into range, so adding 0 there is harmless).
    """
    batch, channels, length = x.shape
    width = weight.shape[1]
    device = x.device
    starts = offsets[:-1].long()
    lengths = offsets[1:].long() - starts
    first = torch.arange(width - 1, device=device)  # j: position within the sequence
    back = torch.arange(1, width, device=device)  # k: how far back a tap reads
    positions = starts[:, None] + first[None, :]  # (S, width - 1)
    sources = positions[:, :, None] - back[None, None, :]  # (S, width - 1, width - 1)
    crosses = (back[None, None, :] > first[None, :, None]) & (first[None, :] < lengths[:, None])[:, :, None]
    crosses = crosses & (sources >= 0)
    read = x[:, :, sources.clamp(0, length - 1).flatten()].view(batch, channels, *sources.shape)
    read = read * crosses.to(x.dtype)
    # weight[:, width - 1 - k] multiplies the input k steps back (F.conv1d is a correlation).
    taps_back = weight.flip(1)[:, 1:]  # (channels, width - 1), column k - 1 for k back
    amounts = torch.einsum("bcsjk,ck->bcsj", read, taps_back.to(x.dtype))
    return positions.clamp(max=length - 1).flatten(), amounts.reshape(batch, channels, -1)


@_args.takes_offsets("x")
def causal_conv1d(
    x: Tensor,
    weight: Tensor,
    bias: Optional[Tensor] = None,
    offsets: Optional[Tensor] = None,
    activation: Optional[str] = None,
    *,
    cu_seqlens: Optional[Tensor] = None,
) -> Tensor:
    """Depthwise causal convolution along time, restarting at every packed sequence.

    For every channel c and time t, with ``width = weight.shape[1]``::

        out[b, c, t] = bias[c] + sum_{k=0}^{width-1} weight[c, width-1-k] * x[b, c, t-k]

    where ``x[b, c, t-k]`` is 0 when ``t - k`` lies before the start of t's sequence (before
    t = 0 without offsets), then ``silu`` when ``activation`` is ``"silu"`` or ``"swish"``.
    This is ``torch.nn.Conv1d(channels, channels, width, groups=channels, padding=width-1)``
    cut to the first L outputs, as in Mamba, and the same arguments as causal-conv1d's
    ``causal_conv1d_fn``.

    Args:
        x: ``(batch, channels, L)``; any strides. With ``offsets``, batch must be 1 and the
            sequences are packed along L.
        weight: ``(channels, width)`` (a ``Conv1d`` weight ``(channels, 1, width)`` is
            ``weight[:, 0]``).
        bias: ``(channels,)`` or ``None``.
        offsets: packed sequences along L (``cu_seqlens`` is an alias): 1-D int32 or int64 of
            length S+1 on x's device, starting at 0, non-decreasing, ending at L. Validated on
            the CPU on every call, on CUDA when ``torch_parprims.set_checks(True)``.
        activation: ``None``, ``"silu"`` or ``"swish"`` (the same).

    Returns:
        ``(batch, channels, L)`` in x's dtype. Differentiable in x, weight and bias.

    Example::

        >>> x, w, b = torch.randn(1, 8, 10), torch.randn(8, 4), torch.randn(8)
        >>> cu = torch.tensor([0, 3, 10])
        >>> packed = causal_conv1d(x, w, b, cu_seqlens=cu, activation="silu")
        >>> alone = causal_conv1d(x[..., 3:], w, b, activation="silu")
        >>> assert torch.allclose(packed[..., 3:], alone, atol=1e-6)
    """
    # cu_seqlens arrives as offsets (see _args.takes_offsets).
    _check_args(x, weight, bias, offsets, activation)
    channels, width = weight.shape
    length = x.shape[-1]
    if length == 0:  # F.conv1d refuses empty inputs; there is nothing to compute
        return torch.zeros_like(x)
    out = F.conv1d(x, weight.unsqueeze(1).to(x.dtype), None if bias is None else bias.to(x.dtype),
                   padding=width - 1, groups=channels)[..., :length]
    if offsets is not None:
        _validate_offset_values(offsets, length)
        if width > 1 and length > 0:
            positions, amounts = _cross_sequence_taps(x, weight, offsets)
            out = out.index_add(2, positions, amounts, alpha=-1)
    return F.silu(out) if activation is not None else out
