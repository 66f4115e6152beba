"""The pipeline schedule of :func:`torch_parprims.distributed.affine_scan`
(``schedule="pipeline"``): the rows cut into groups, and each group's state passed from rank to
rank along the scan by point-to-point messages, so that every rank reads its slice once while
the ranks before and after it work on other groups.

The affine scan is bound by memory traffic, so every byte counts: each group's scan writes
straight into its rows of the one output tensor (``_affine_scan_into``), and its backward into
its rows of the gradients (``_affine_scan_backward_into``), instead of concatenating the groups'
results afterwards (a copy that would cost two of the forward's three arrays again).
"""
import math
from typing import List, Optional

import torch
from torch.autograd.function import once_differentiable

from ._collectives import chain_neighbours, global_rank, recv, send, wait_all
from .ops.affine import _state_dtype, _state_shape, composed_backward

_ops = torch.ops.parprims


def cut_axis(b: torch.Tensor, dim: int) -> Optional[int]:
    """The dimension of ``b`` whose rows the pipeline cuts into groups: the largest one other
    than the scanned ``dim`` (the outermost on a tie, whose groups are the largest blocks of
    memory); None when ``b`` has no other dimension."""
    others = [d for d in range(b.dim()) if d != dim]
    if not others:
        return None
    return max(others, key=lambda d: (b.shape[d], -d))


# A group's scan runs whole rows (one pass over the input) while it has at least this many rows
# for each multiprocessor of the GPU; with fewer, the library cuts its rows into time spans,
# which reads the input twice and would cost the pipeline more than its fill saves.
_ROWS_PER_SM = 2
_MAX_DEFAULT_GROUPS = 16
_CPU_DEFAULT_GROUPS = 8


def default_groups(b: torch.Tensor, dim: int) -> int:
    """The number of groups for ``pipeline_chunks=None``: on a GPU, as many as keep
    ``_ROWS_PER_SM`` rows a multiprocessor in each (at most ``_MAX_DEFAULT_GROUPS``); else
    ``_CPU_DEFAULT_GROUPS``."""
    if b.device.type != "cuda":
        return _CPU_DEFAULT_GROUPS
    dim = dim % b.dim()
    rows = math.prod(n for d, n in enumerate(b.shape) if d != dim)
    per_group = _ROWS_PER_SM * torch.cuda.get_device_properties(b.device).multi_processor_count
    return max(1, min(_MAX_DEFAULT_GROUPS, rows // per_group))


def group_bounds(size: int, chunks: int) -> List[int]:
    """Up to ``chunks`` near-equal groups of ``size`` rows, as their boundaries [0, ..., size]."""
    k = max(1, min(chunks, size))
    return [size * i // k for i in range(k + 1)]


class _Rows:
    """The rows of one group: slices of the time-shaped tensors along the cut axis, and of the
    states (which lack the time dimension, and lead with the sequence index when packed)."""

    def __init__(self, axis: Optional[int], dim: int, packed: bool, lo: int, hi: int):
        self.axis, self.lo, self.count = axis, lo, hi - lo
        self.state_axis = None if axis is None else axis - (axis > dim) + packed

    def of(self, x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        return x if x is None or self.axis is None else x.narrow(self.axis, self.lo, self.count)

    def of_state(self, x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        return x if x is None or self.axis is None else x.narrow(self.state_axis, self.lo, self.count)

    def state_shape(self, whole: List[int]) -> List[int]:
        """The shape of the group's states, from that of all rows' states."""
        shape = list(whole)
        if self.state_axis is not None:
            shape[self.state_axis] = self.count
        return shape


class PipelinedAffineScan(torch.autograd.Function):
    """Forward, per group of rows: receive the state entering this rank's slice (the first rank
    of the scan reads ``initial_state``), scan into the group's rows of ``h``, send the state
    leaving the slice on. Backward, per group, from the last rank of the scan to the first:
    receive the gradient of the state leaving the slice (the last rank: the summed gradient of
    ``final_state``), run the library's one-scan backward into the group's rows of the
    gradients, send the gradient of the entering state back."""

    @staticmethod
    def forward(ctx, a, b, initial_state, offsets, dim, group, rank, world, reverse, log_gates, chunks):
        import torch.distributed as dist

        before, after = chain_neighbours(group, rank, world, reverse)
        axis = cut_axis(b, dim)
        state_shape = _state_shape(b, dim, offsets)
        state_dtype = _state_dtype(b.dtype)
        bounds = group_bounds(1 if axis is None else b.shape[axis], chunks)
        groups = [_Rows(axis, dim, offsets is not None, lo, hi) for lo, hi in zip(bounds, bounds[1:])]
        gates = a.expand_as(b)  # a view: groups of broadcast gates are read in place
        h = torch.empty_like(b)
        entering, leaving, sends = [], [], []
        for rows in groups:
            state_in = rows.of_state(initial_state)
            if before is not None:
                shape = rows.state_shape(state_shape)
                state_in = recv(shape, state_dtype, b.device, before, group) if math.prod(shape) else None
            state_out = _ops._affine_scan_into(rows.of(gates), rows.of(b), dim, state_in, offsets, reverse,
                                               log_gates, rows.of(h))
            if after is not None and state_out.numel():
                sends.append(send(state_out, after, group))
            entering.append(state_in)
            leaving.append(state_out)
        wait_all(sends)
        final_state = _cat(leaving, groups)
        last = world - 1 if not reverse else 0  # the rank that ends the scan
        dist.broadcast(final_state, src=global_rank(group, last), group=group)
        ctx.dim, ctx.group, ctx.reverse, ctx.log_gates = dim, group, reverse, log_gates
        ctx.before, ctx.after, ctx.groups = before, after, groups
        ctx.initial_dtype = None if initial_state is None else initial_state.dtype
        carry = None if entering[0] is None else _cat(entering, groups)
        ctx.save_for_backward(a, b, h, carry, offsets)
        return h, final_state

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h, grad_final):
        import torch.distributed as dist

        a, b, h, carry, offsets = ctx.saved_tensors
        dim, reverse, log_gates = ctx.dim, ctx.reverse, ctx.log_gates
        # final_state is replicated: the gradient of the one state is the sum of every rank's.
        total_final = grad_final.contiguous().clone()
        dist.all_reduce(total_final, group=ctx.group)
        gates = a.expand_as(b)
        grad_b = torch.empty_like(b)
        # The backward writes the gates' gradient in b's shape: into grad_a's rows when a has
        # that shape, else into a group's buffer, summed to a's shape.
        needs_a = ctx.needs_input_grad[0]
        in_place = needs_a and tuple(a.shape) == tuple(b.shape)
        grad_a = torch.empty_like(b) if in_place else torch.zeros_like(a) if needs_a else None
        grad_carry, sends = [], []
        for rows in ctx.groups:
            seed = rows.of_state(total_final)
            if ctx.after is not None and seed.numel():
                seed = recv(seed.shape, seed.dtype, seed.device, ctx.after, ctx.group)
            state_in = rows.of_state(carry)
            if offsets is None:
                grad_a_rows = rows.of(grad_a) if in_place else torch.empty_like(rows.of(b))
                grad_in = _ops._affine_scan_backward_into(rows.of(gates), rows.of(h), rows.of(grad_h), seed,
                                                          state_in, dim, reverse, log_gates, grad_a_rows,
                                                          rows.of(grad_b))
            else:  # packed sequences: affine_scan's own composed backward (two scans), copied in
                grad_a_rows, lam, grad_in = composed_backward(rows.of(gates), rows.of(b), state_in, offsets,
                                                              rows.of(grad_h), seed, dim, reverse, log_gates, needs_a)
                rows.of(grad_b).copy_(lam)
                if in_place:
                    rows.of(grad_a).copy_(grad_a_rows)
            if needs_a and not in_place:
                _add_to_gates(grad_a, grad_a_rows, rows, b.dim())
            if ctx.before is not None and grad_in.numel():
                sends.append(send(grad_in, ctx.before, ctx.group))
            grad_carry.append(grad_in)
        wait_all(sends)
        grad_initial = None
        if ctx.initial_dtype is not None and ctx.needs_input_grad[2]:
            # Only the first rank of the scan read initial_state; elsewhere it had no effect.
            grad_initial = _cat(grad_carry, ctx.groups)
            if ctx.before is not None:
                grad_initial = torch.zeros_like(grad_initial)
            grad_initial = grad_initial.to(ctx.initial_dtype)
        return grad_a, grad_b, grad_initial, None, None, None, None, None, None, None, None


def _cat(states, groups) -> torch.Tensor:
    """The groups' states side by side along the states' cut axis."""
    axis = groups[0].state_axis
    return states[0].contiguous() if axis is None else torch.cat(states, axis)


def _add_to_gates(grad_a: torch.Tensor, grad_rows: torch.Tensor, rows: _Rows, b_dims: int) -> None:
    """Adds one group's gradient of the expanded gates (b's shape) into ``grad_a``, the gradient of
    gates that broadcast to b."""
    aligned = grad_a.view([1] * (b_dims - grad_a.dim()) + list(grad_a.shape))
    if rows.axis is not None and aligned.shape[rows.axis] != 1:
        aligned = aligned.narrow(rows.axis, rows.lo, rows.count)
    aligned += grad_rows.sum_to_size(aligned.shape)
