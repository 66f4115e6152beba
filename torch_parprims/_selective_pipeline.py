"""The pipeline schedule of :func:`torch_parprims.distributed.selective_scan`
(``schedule="pipeline"``): the channels cut into groups, and each group's state passed from
rank to rank by point-to-point messages, so that every rank scans its slice once while the
ranks before and after it work on other groups."""
import math

import torch
from torch.autograd.function import once_differentiable

from ._collectives import chain_neighbours, global_rank, recv, send, wait_all
from ._selective_slices import SELECTIVE_INPUTS, ScanSpec, grad_leaf, run_selective


def _channel_cuts(dim: int, chunks: int, B: torch.Tensor, C: torch.Tensor):
    """Channel boundaries [0, ..., dim] of the pipeline's groups: up to ``chunks`` near-equal
    ones, cut where grouped B and C (channel d reads group d // (dim // G)) change group."""
    unit = 1
    for P in (B, C):
        if P.dim() == 4 and P.shape[1] > 0:
            unit = math.lcm(unit, dim // P.shape[1])
    units = dim // unit
    k = max(1, min(chunks, units))
    return [units * i // k * unit for i in range(k + 1)]


def _channel_axis(name: str, ndim: int):
    """The axis of input ``name`` (of ``ndim`` dimensions) that runs over channels (B and C:
    their group axis when grouped), or None when every channel reads all of it (variable B
    and C)."""
    if name in ("u", "delta", "z", "initial_state"):
        return 1
    if name in ("A", "D", "delta_bias"):
        return 0
    if name in ("B", "C"):
        return {2: 0, 3: None, 4: 1}[ndim]
    raise AssertionError(name)


def _piece(name: str, x, lo: int, hi: int, dim: int):
    """The part of input ``name`` that the channels [lo, hi) read."""
    if not isinstance(x, torch.Tensor):
        return x
    axis = _channel_axis(name, x.dim())
    if axis is None:
        return x
    if name in ("B", "C") and x.dim() == 4:
        per_group = dim // x.shape[1]
        lo, hi = lo // per_group, hi // per_group
    return x.narrow(axis, lo, hi - lo)


class PipelinedSelectiveScan(torch.autograd.Function):
    """The pipeline schedule of :func:`selective_scan`: per group of channels, receive the state
    entering this rank's slice, scan, send the state leaving it. The autograd graph of each
    group's scan (on detached pieces of the inputs) is kept for the backward, which runs the
    same pipeline from the last rank to the first with the gradients of those states."""

    @staticmethod
    def forward(ctx, spec: ScanSpec, chunks: int, *inputs):
        import torch.distributed as dist

        args = dict(zip(SELECTIVE_INPUTS, inputs))
        needs = dict(zip(SELECTIVE_INPUTS, ctx.needs_input_grad[2:]))
        u, A = args["u"], args["A"]
        dim, states = u.shape[1], A.shape[-1]
        rows = spec.cu_seqlens.numel() - 1 if spec.cu_seqlens is not None else u.shape[0]
        state_dtype = torch.float64 if u.dtype == torch.float64 else torch.float32
        first, last = spec.rank == 0, spec.rank == spec.world - 1
        previous, following = chain_neighbours(spec.group, spec.rank, spec.world)
        cuts = _channel_cuts(dim, chunks, args["B"], args["C"])
        pieces, outs, lasts, sends = [], [], [], []
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            leaves = {name: grad_leaf(_piece(name, x, lo, hi, dim), needs[name]) for name, x in args.items()}
            entering = leaves["initial_state"]  # rank 0 reads it; the others the state received
            if not first:
                received = recv((rows, hi - lo, states), state_dtype, u.device, previous, spec.group)
                entering = received.requires_grad_(any(ctx.needs_input_grad))
            with torch.enable_grad():
                out, leaving = run_selective(leaves, spec, entering)
            if not last:
                sends.append(send(leaving.detach(), following, spec.group))
            pieces.append((lo, hi, leaves, entering))
            outs.append(out)
            lasts.append(leaving)
        wait_all(sends)
        # The state after the whole sequence is the last rank's; every rank returns it.
        last_state = torch.cat([x.detach() for x in lasts], 1)
        dist.broadcast(last_state, src=global_rank(spec.group, spec.world - 1), group=spec.group)
        ctx.spec, ctx.pieces, ctx.outs, ctx.lasts, ctx.dim = spec, pieces, outs, lasts, dim
        ctx.inputs = args  # views of them are the groups' leaves: no storage held beyond those
        return torch.cat([x.detach() for x in outs], 1), last_state

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, grad_last):
        import torch.distributed as dist

        spec = ctx.spec
        first, last = spec.rank == 0, spec.rank == spec.world - 1
        previous, following = chain_neighbours(spec.group, spec.rank, spec.world)
        # last_state is replicated: the gradient of the one state is the sum of every rank's.
        piece = ctx.lasts[0]
        total_last = grad_last.clone() if grad_last is not None else piece.new_zeros(
            (piece.shape[0], ctx.dim, piece.shape[2]))
        dist.all_reduce(total_last, group=spec.group)
        parts = {name: [] for name in SELECTIVE_INPUTS}
        sends = []
        for (lo, hi, leaves, entering), out, leaving in zip(ctx.pieces, ctx.outs, ctx.lasts):
            if last:
                seed = total_last.narrow(1, lo, hi - lo)
            else:
                seed = recv(leaving.shape, leaving.dtype, leaving.device, following, spec.group)
            names = [n for n, x in leaves.items() if isinstance(x, torch.Tensor) and x.requires_grad
                     and (first or n != "initial_state")]  # read on rank 0 only
            wrt = [leaves[n] for n in names]
            if not first and entering.requires_grad:
                wrt.append(entering)
            seeds = [grad_out.narrow(1, lo, hi - lo) if grad_out is not None else torch.zeros_like(out), seed]
            grads = list(torch.autograd.grad([out, leaving], wrt, seeds, allow_unused=True)) if wrt else []
            if not first:
                grad_entering = grads.pop() if entering.requires_grad else None
                message = torch.zeros_like(leaving) if grad_entering is None else grad_entering
                sends.append(send(message, previous, spec.group))
            for name, g in zip(names, grads):
                parts[name].append((lo, hi, g))
        wait_all(sends)
        grads = [_merge(name, parts[name], ctx.inputs[name], ctx.dim) if parts[name] else None
                 for name in SELECTIVE_INPUTS]
        return (None, None, *grads)


def _merge(name: str, parts, like: torch.Tensor, dim: int) -> torch.Tensor:
    """An input's gradient from its groups' ``(lo, hi, grad)`` parts (channels [lo, hi) of
    ``dim``; grad None where the group did not reach it), shaped and typed like ``like``: the
    parts side by side along the channel axis (they cover it in order), or summed when every
    group read the whole input (variable B and C)."""
    axis = _channel_axis(name, like.dim())
    if axis is None:
        total = torch.zeros_like(like)
        for _, _, g in parts:
            if g is not None:
                total += g
        return total
    pieces = [g if g is not None else torch.zeros_like(_piece(name, like, lo, hi, dim)) for lo, hi, g in parts]
    return torch.cat(pieces, axis)
