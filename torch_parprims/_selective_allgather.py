"""The all-gather schedule of :func:`torch_parprims.distributed.selective_scan` (the default,
``schedule="all_gather"``): every rank scans its slice from a zero state, the ranks all-gather
one (decay product, last state) pair per row, channel and state, and each rank but the first
runs its slice again from the carry the ranks before it leave."""
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from ._collectives import all_gather as _all_gather
from ._selective_slices import SELECTIVE_INPUTS, ScanSpec, grad_leaf, run_selective
from .ops.reduce import segment_reduce as _segment_reduce


def _decay_product(args: dict, spec: ScanSpec, like: torch.Tensor) -> torch.Tensor:
    """exp(A * sum_t delta_t) over this slice, per row (or sequence), channel and state: the
    factor by which the slice scales the state entering it. ``like``: a state (dtype, shape)."""
    delta = args["delta"].to(like.dtype)
    if args["delta_bias"] is not None:
        delta = delta + args["delta_bias"].to(like.dtype)[:, None]
    if spec.delta_softplus:
        delta = F.softplus(delta)  # threshold 20, as the op
    if spec.cu_seqlens is None:
        total = delta.sum(-1)  # (batch, dim)
    else:
        total = _segment_reduce(delta[0], spec.cu_seqlens, "sum", dim=-1).t()  # (S, dim)
    return torch.exp(args["A"].to(like.dtype) * total[..., None])


def _chain(products: torch.Tensor, finals: torch.Tensor):
    """The state entering each rank's slice (a zero state enters the first) and the one leaving
    the last, composing ``s = P_r * s + f_r`` in rank order."""
    state = torch.zeros_like(finals[0])
    carries = []
    for r in range(finals.shape[0]):
        carries.append(state)
        state = torch.addcmul(finals[r], products[r], state)
    return torch.stack(carries), state


class AllGatherSelectiveScan(torch.autograd.Function):
    """Keeps the autograd graphs of the local passes (run on detached leaves) and, in the
    backward, differentiates them and the rank chain explicitly, so that every rank takes part
    in the backward's one all-gather whatever its loss reads."""

    @staticmethod
    def forward(ctx, spec: ScanSpec, *inputs):
        leaves = [grad_leaf(x, need) for x, need in zip(inputs, ctx.needs_input_grad[1:])]
        args = dict(zip(SELECTIVE_INPUTS, leaves))
        first = spec.rank == 0
        with torch.enable_grad():
            # Pass 1: the slice from a zero state (rank 0: from initial_state, already final).
            out, local_final = run_selective(args, spec, args["initial_state"] if first else None)
            product = torch.zeros_like(local_final) if first else _decay_product(args, spec, local_final)
        gathered = _all_gather(torch.stack([product, local_final]).detach(), spec.world, spec.group)
        carries, last_state = _chain(gathered[:, 0], gathered[:, 1])
        carry = None
        if not first:
            # Pass 2: the slice from the state the ranks before it leave.
            carry = carries[spec.rank].clone().requires_grad_(any(ctx.needs_input_grad))
            with torch.enable_grad():
                out, _ = run_selective(args, spec, carry)
        ctx.spec, ctx.leaves, ctx.out, ctx.carry = spec, leaves, out, carry
        ctx.product, ctx.local_final, ctx.gathered = product, local_final, gathered
        return out.detach(), last_state

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, grad_last):
        spec = ctx.spec
        first = spec.rank == 0
        if grad_out is None:
            grad_out = torch.zeros_like(ctx.out)
        if grad_last is None:
            grad_last = torch.zeros_like(ctx.local_final)
        wanted = [i for i, x in enumerate(ctx.leaves) if isinstance(x, torch.Tensor) and x.requires_grad]
        wanted_leaves = [ctx.leaves[i] for i in wanted]
        grads = [None] * len(SELECTIVE_INPUTS)

        def accumulate(new):
            for i, g in zip(wanted, new):
                if g is not None:
                    grads[i] = g if grads[i] is None else grads[i] + g

        # What this rank's out says about its inputs and the state entering its slice (pass 2).
        grad_carry = torch.zeros_like(ctx.local_final)
        if not first:
            *through_out, grad_carry = torch.autograd.grad(ctx.out, wanted_leaves + [ctx.carry], grad_out,
                                                           allow_unused=True)
            accumulate(through_out)
            grad_carry = torch.zeros_like(ctx.local_final) if grad_carry is None else grad_carry
        # Every rank's, through the chain, to this rank's (P, f).
        every = _all_gather(torch.stack([grad_carry, grad_last]), spec.world, spec.group)
        summaries = ctx.gathered.detach().requires_grad_()
        with torch.enable_grad():
            carries, last_state = _chain(summaries[:, 0], summaries[:, 1])
            total = (carries * every[:, 0]).sum() + (last_state * every[:, 1].sum(0)).sum()
        grad_product, grad_final = torch.autograd.grad(total, summaries)[0][spec.rank]
        # Through pass 1 (rank 0: its out and its last state come from that one pass).
        if first:
            outputs, seeds = [ctx.out, ctx.local_final], [grad_out, grad_final]
        else:
            outputs, seeds = [ctx.product, ctx.local_final], [grad_product, grad_final]
        linked = [(o, g) for o, g in zip(outputs, seeds) if o.requires_grad]
        if wanted_leaves and linked:
            accumulate(torch.autograd.grad([o for o, _ in linked], wanted_leaves, [g for _, g in linked],
                                           allow_unused=True))
        return (None, *grads)
