"""The all-gather schedule of :func:`torch_parprims.distributed.affine_scan` (the default,
``schedule="all_gather"``): every rank scans its slice from a zero state, the ranks all-gather
one affine map per row (the slice's gate product and local final state), each composes the maps
of the ranks before it into its carry-in, and scans its slice again from there."""
import torch
from torch.autograd.function import once_differentiable

from ._collectives import all_gather as _all_gather
from .ops.affine import affine_scan as _local_affine_scan

_ops = torch.ops.parprims


def _scan_order(rank: int, world: int, reverse: bool):
    """The ranks whose slices the scan passes before ``rank``'s, in the order it passes them."""
    return range(world - 1, rank, -1) if reverse else range(rank)


def _compose(products: torch.Tensor, finals: torch.Tensor, ranks, start: torch.Tensor) -> torch.Tensor:
    """The state after passing ``ranks`` in order from ``start``: ``s = P_r * s + f_r`` each."""
    state = start
    for r in ranks:
        state = torch.addcmul(finals[r], products[r], state)
    return state


def _gate_product(a: torch.Tensor, b: torch.Tensor, dim: int, log_gates: bool, state: torch.Tensor, offsets):
    """The product of the gates along ``dim`` for every row (and sequence, with ``offsets``),
    in the state's dtype and shape.

    ``a`` is expanded (not copied) to ``b``'s length along ``dim``, so a gate of size 1 there
    counts once per step. An empty slice (or sequence) gives 1 (the identity map)."""
    if offsets is not None:
        # Per sequence: the recurrence from 1 with no input ends at the product of the gates.
        no_input = torch.zeros((), dtype=b.dtype, device=b.device).expand(b.shape)
        _, product = _local_affine_scan(a, no_input, dim, torch.ones_like(state), offsets, log_gates=log_gates)
        return product
    shape = [1] * (b.dim() - a.dim()) + list(a.shape)
    shape[dim] = b.shape[dim]
    gates = a.reshape([1] * (b.dim() - a.dim()) + list(a.shape)).expand(shape).to(state.dtype)
    product = gates.sum(dim).exp() if log_gates else gates.prod(dim)
    return product.expand_as(state)


class AllGatherAffineScan(torch.autograd.Function):
    """Forward: the local scan from a zero state, one all-gather of every rank's (gate
    product, local final state), the carry composed from the ranks before, and the local scan
    again from it. Backward: the same in the other direction, from the last rank to the first
    (see :func:`torch_parprims.distributed.affine_scan`)."""

    @staticmethod
    def forward(ctx, a, b, initial_state, offsets, dim, group, rank, world, reverse, log_gates):
        first = rank == (world - 1 if reverse else 0)
        # Pass 1: the local scan from a zero state (from initial_state on the first rank, whose
        # h is then already final).
        h, local_final = _local_affine_scan(a, b, dim, initial_state if first else None, offsets, reverse,
                                            log_gates)
        if first:
            # Nothing enters the first rank's slice but initial_state, already folded in.
            product = torch.zeros_like(local_final)
        else:
            product = _gate_product(a, b, dim, log_gates, local_final, offsets)
            del h  # freed before pass 2 allocates its own h
        summaries = _all_gather(torch.stack([product, local_final]), world, group)
        products, finals = summaries[:, 0], summaries[:, 1]
        zero = torch.zeros_like(local_final)
        carry = _compose(products, finals, _scan_order(rank, world, reverse), zero)
        everything = range(world - 1, -1, -1) if reverse else range(world)
        final_state = _compose(products, finals, everything, zero)
        if not first:
            # Pass 2: the exact local result from the carry-in.
            h, _ = _local_affine_scan(a, b, dim, carry, offsets, reverse, log_gates)
        ctx.dim, ctx.group, ctx.rank, ctx.world = dim, group, rank, world
        ctx.reverse, ctx.log_gates, ctx.first = reverse, log_gates, first
        ctx.initial_dtype = None if initial_state is None else initial_state.dtype
        ctx.save_for_backward(a, b, carry if not first else initial_state, products, offsets)
        return h, final_state

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h, grad_final):
        a, b, carry, products, offsets = ctx.saved_tensors
        dim, reverse, rank, world = ctx.dim, ctx.reverse, ctx.rank, ctx.world
        gate = a.exp() if ctx.log_gates else a
        gate = gate.conj() if gate.is_complex() else gate
        gate = gate.expand_as(b)
        if grad_h is None:
            grad_h = torch.zeros_like(b)
        if grad_final is None:
            grad_final = torch.zeros(products.shape[1:], dtype=products.dtype, device=products.device)
        # mu_t = conj(a_t) * (grad_h_t + mu_{t+1}): the gradient reaching the state before step
        # t runs against the scan; the state gradient leaving a slice is an affine map of the
        # one entering it, with the same gate product (conjugated) as the forward's.
        weighted = gate * grad_h
        _, local_state_grad = _local_affine_scan(gate, weighted, dim, None, offsets, not reverse)
        summaries = _all_gather(torch.stack([local_state_grad, grad_final]), world, ctx.group)
        state_grads, final_grads = summaries[:, 0], summaries[:, 1]
        # final_state is replicated: its gradient is the sum of every rank's.
        total_final_grad = final_grads.sum(0)
        later = _scan_order(rank, world, not reverse)
        products_c = products.conj() if products.is_complex() else products
        grad_carry_in = _compose(products_c, state_grads, later, total_final_grad)
        # The library's backward from that gradient carry (pass 2 of the reverse scheme).
        after, grad_carry = _ops._affine_scan_exclusive(gate, weighted, dim, grad_carry_in, offsets, not reverse, False)
        del weighted
        # In place, into buffers the scans just allocated: the peak memory stays that of the
        # inputs plus two arrays of b's size, for sequences as long as a device holds.
        lam = after.add_(grad_h)
        grad_a = None
        if ctx.needs_input_grad[0]:
            h_prev, _ = _ops._affine_scan_exclusive(a, b, dim, carry, offsets, reverse, ctx.log_gates)
            grad_a = (h_prev.conj_physical_() if h_prev.is_complex() else h_prev).mul_(lam)
            if ctx.log_gates:
                grad_a.mul_(gate)
            grad_a = grad_a.sum_to_size(a.shape)
        grad_initial = None
        if ctx.initial_dtype is not None and ctx.needs_input_grad[2]:
            # Only the first rank read initial_state; elsewhere it had no effect.
            grad_initial = grad_carry if ctx.first else torch.zeros_like(grad_carry)
            grad_initial = grad_initial.to(ctx.initial_dtype)
        return grad_a, lam, grad_initial, None, None, None, None, None, None, None
