"""Sequence parallelism over torch.distributed: a recurrence whose time dimension is split
across the ranks of a process group.

Importing this module does not initialize (or need) a process group; the collectives run only
when a function is called, through ``torch.distributed`` (NCCL on GPUs, gloo on the CPU).
"""
from typing import Optional, Tuple

import torch

from ._affine_allgather import AllGatherAffineScan
from ._affine_pipeline import PipelinedAffineScan, default_groups
from ._collectives import local_cu_seqlens
from ._distributed_conv import causal_conv1d, slice_start
from ._selective_allgather import AllGatherSelectiveScan
from ._selective_pipeline import PipelinedSelectiveScan
from ._selective_slices import ScanSpec
from .ops import _args

__all__ = ["affine_scan", "selective_scan", "causal_conv1d", "local_cu_seqlens", "slice_start"]


def affine_scan(
    a,
    b: torch.Tensor,
    dim: int = -1,
    initial_state: Optional[torch.Tensor] = None,
    group=None,
    reverse: bool = False,
    log_gates: bool = False,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
    schedule: str = "all_gather",
    pipeline_chunks: Optional[int] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``h_t = a_t * h_{t-1} + b_t`` along ``dim``, with the time dimension split across ``group``.

    Every rank of ``group`` (the default process group when ``None``) holds a contiguous slice
    of the time dimension, in rank order: rank 0 the first steps, the last rank the last ones.
    Slices may have different lengths, empty ones included. Each rank gets its slice of the
    ``h`` that :func:`torch_parprims.affine_scan` computes on the whole sequence in one
    process, and the global final state.

    Args:
        a, b, dim, reverse, log_gates: as for :func:`torch_parprims.affine_scan`, on this
            rank's slice (``a`` broadcasts to ``b``; its size along ``dim`` is that of ``b`` or
            1). Every dimension other than ``dim`` must have the same size on every rank.
        initial_state: ``h_{-1}``, shaped like ``b`` without ``dim`` (with ``cu_seqlens``,
            ``(S, *that)``, one per sequence); zeros when ``None``. Pass the same value (or
            ``None``) on every rank: only the first rank of the scan (rank 0, or the last rank
            with ``reverse=True``) reads it.
        group: the process group; every rank of it must call this function.
        cu_seqlens: packed sequences along ``dim`` that may cross rank boundaries: the S+1
            offsets of the whole packed sequence as seen from this rank's slice, that is the
            global offsets minus the slice's start, clamped to ``[0, local length]`` (see
            :func:`local_cu_seqlens`); the same S on every rank. A sequence continues its
            state from the rank before (after, with ``reverse``); one that starts on a rank
            does not inherit the carry. States are then per sequence.
        schedule: ``"all_gather"`` (every rank scans at once, then again from its carry; below)
            or ``"pipeline"`` (the state passes from rank to rank, a group of rows at a time;
            every rank reads its slice once; below).
        pipeline_chunks: with ``schedule="pipeline"``, into how many groups the rows are cut
            (along the largest dimension other than ``dim``; at most its size). ``None``: on a
            GPU, as many as keep two rows a multiprocessor in each group (up to 16; a group
            with fewer rows would have its rows cut into time spans, read twice), else 8.

    Returns:
        ``(h, final_state)``: ``h`` shaped like this rank's ``b``; ``final_state`` (shaped like
        ``initial_state``, float32 for half inputs) is the state after the whole sequence (at
        its start with ``reverse=True``; per sequence with ``cu_seqlens``), the same on every
        rank.

    Gradients: ``a`` and ``b`` get the gradient of their slice. ``final_state`` is one value
    replicated on every rank, so the gradients that reach it on all ranks are summed, and
    ``initial_state``'s gradient arrives on the rank that read it (zeros elsewhere): summing
    (all-reducing) it over the group gives the gradient of the shared initial state. The same
    holds for gates of size 1 along ``dim`` (shared by every step): each rank gets its steps'
    share of their gradient.

    Communication: one all-gather per call (forward, and again in the backward) of a per-row
    summary, sized (rows x state), never the sequence:

    1. Each rank scans its slice from a zero state and sends ``(P, f)``: ``P`` the product of
       its gates along ``dim`` (the first rank of the scan sends 0 and folds ``initial_state``
       into ``f``), ``f`` its local final state. The pair is the affine map from the state
       entering the slice to the state leaving it: ``out = P * in + f``. With ``cu_seqlens``
       there is one pair per sequence (a sequence absent from a slice sends the identity
       ``(1, 0)``), and ``P`` is the final state of a run from 1 with no input (one more
       local scan).
    2. Each rank composes the maps of the ranks before it in scan order (an exclusive scan of
       the affine monoid over ranks, a loop over the gathered summaries on the device), which
       gives its carry-in, and all of them give the global final state.
    3. Each rank other than the first reruns its local scan with ``initial_state=carry``.
       Rerunning is exact (the same recurrence one process runs, from the right state) and
       cheapest in memory: the first pass's ``h`` is freed before the second pass allocates
       its own, whereas correcting ``h`` by ``cumprod(a) * carry`` keeps a cumulative gate
       product as large as ``a`` alive (and can overflow where ``h`` does not). It also moves
       fewer bytes: pass 1 (read a, b; write h), the gate product (read a) and pass 2 (read
       a, b; write h) are 7 slice-sized arrays, against 8 for scan, ``cumprod`` and fix-up.
       One process moves 3 arrays of the whole sequence, so on W ranks the forward is at most
       3W/7 times as fast as on one (the first rank of the scan runs pass 1 only); the gain is
       memory: a rank holds its slice only, so W ranks run a sequence W times as long.

    The backward is the same scheme in the other direction (the gradient crosses the ranks
    from the last to the first): each rank runs the reverse scan of the incoming gradient
    from zero, the ranks all-gather that local state gradient with their share of the
    gradient of ``final_state``, compose the later ranks' maps (with the gate products saved
    by the forward), and rerun the library's backward from the right gradient carry.
    No host synchronization besides the collectives themselves.

    ``schedule="pipeline"`` reads every slice once instead. The rows (every dimension but
    ``dim``) are cut into groups along the largest other dimension (``pipeline_chunks``); rank r
    scans a group from the state that the rank before it in the scan sends for it (the first
    rank from ``initial_state``) and sends the group's last state on, so that while rank r scans
    group k, the rank before it scans group k + 1 (point-to-point messages of one group's
    states; the last rank broadcasts ``final_state``). Each group's scan writes into its rows
    of ``h`` in place. On W ranks and k groups a slice's scan ends after about (k + W - 1) / k
    of its own time, where the all-gather schedule reads the slice twice (up to 7/3 of it);
    the backward runs the same pipeline from the last rank to the first, each group's
    one-scan backward writing into its rows of the gradients. Each group is a separate call of
    the scan on a W-th of the sequence and a k-th of the rows, so it pays when those calls
    still fill the device.

    Example (``torchrun --nproc-per-node=2 example.py``)::

        import torch, torch.distributed as dist
        import torch_parprims as pp

        dist.init_process_group("nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.cuda.set_device(rank)
        torch.manual_seed(0)  # the same full sequence on every rank, for the illustration
        a, b = torch.rand(4, 8, 1000, device="cuda"), torch.randn(4, 8, 1000, device="cuda")
        part = slice(rank * 1000 // world, (rank + 1) * 1000 // world)
        h, last = pp.distributed.affine_scan(a[..., part], b[..., part])
        h_full, last_full = pp.affine_scan(a, b)
        assert torch.allclose(h, h_full[..., part]) and torch.allclose(last, last_full)
    """
    import torch.distributed as dist

    _check_schedule(schedule, pipeline_chunks, optional=True)
    a = _args.gate(a, b)
    dim = dim % b.dim()
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    offsets = None if cu_seqlens is None else _args.expect_tensor("cu_seqlens", cu_seqlens)
    if schedule == "all_gather":
        return AllGatherAffineScan.apply(a, b, initial_state, offsets, dim, group, rank, world, reverse, log_gates)
    chunks = default_groups(b, dim) if pipeline_chunks is None else pipeline_chunks
    return PipelinedAffineScan.apply(a, b, initial_state, offsets, dim, group, rank, world, reverse, log_gates, chunks)


def _check_schedule(schedule, pipeline_chunks, optional: bool = False) -> None:
    if schedule not in ("all_gather", "pipeline"):
        raise ValueError(f"schedule: expected 'all_gather' or 'pipeline', got {schedule!r}")
    if optional and pipeline_chunks is None:
        return
    if isinstance(pipeline_chunks, bool) or not isinstance(pipeline_chunks, int) or pipeline_chunks < 1:
        expected = "a positive int or None" if optional else "a positive int"
        raise ValueError(f"pipeline_chunks: expected {expected}, got {pipeline_chunks!r}")


# ---- the selective scan -------------------------------------------------------------------


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    delta_bias: Optional[torch.Tensor] = None,
    delta_softplus: bool = False,
    initial_state: Optional[torch.Tensor] = None,
    group=None,
    *,
    cu_seqlens: Optional[torch.Tensor] = None,
    schedule: str = "all_gather",
    pipeline_chunks: int = 8,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`torch_parprims.selective_scan` with the time dimension L split across ``group``.

    Every rank holds a contiguous slice of L, in rank order (any lengths, empty ones included):
    its slice of ``u``, ``delta``, ``z`` and of variable or grouped ``B`` and ``C``; ``A``,
    ``D``, ``delta_bias`` and constant ``B``/``C`` are the same on every rank. Each rank gets
    its slice of the ``out`` that one process computes on the whole sequence, and the global
    ``last_state`` (the same on every rank).

    Args:
        u, delta, A, B, C, D, z, delta_bias, delta_softplus: as for
            :func:`torch_parprims.selective_scan`, on this rank's slice.
        initial_state: ``(batch, dim, N)`` (``(S, dim, N)`` with ``cu_seqlens``) or ``None``;
            only rank 0 reads it.
        group: the process group (the default one when ``None``); every rank calls this.
        cu_seqlens: packed sequences (batch 1) that may cross rank boundaries, as this rank
            sees them: the global offsets minus the slice's start, clamped to ``[0, local L]``
            (:func:`local_cu_seqlens`). A sequence continues its state from the rank before; one
            that starts on a rank begins from its ``initial_state`` (zeros when ``None``).
        schedule: ``"all_gather"`` (every rank scans at once; below) or ``"pipeline"`` (the
            state passes from rank to rank, a group of channels at a time; below).
        pipeline_chunks: with ``schedule="pipeline"``, into how many groups of channels the
            scan is cut (at most ``dim``; with grouped B and C, at most their G, cut at group
            boundaries).

    Returns:
        ``(out, last_state)`` as :func:`torch_parprims.selective_scan` returns them: ``out``
        this rank's slice, ``last_state`` the state after the whole sequence (per sequence with
        ``cu_seqlens``).

    Gradients flow to every input of every rank. Parameters shared by the ranks (``A``, ``D``,
    ``delta_bias``, constant ``B``/``C``) get each rank's share, to be summed over the group (as
    data parallelism all-reduces them anyway); ``initial_state``'s arrives on rank 0;
    ``last_state`` is replicated, so the gradients reaching it on all ranks are summed.

    The scheme is :func:`affine_scan`'s, per (row, channel, state): rank r's slice maps the state
    entering it to the one leaving it by ``out = P_r * in + f_r``, where ``f_r`` is the slice's
    last state from a zero start and ``P_r = exp(A * sum_t delta_t)`` the product of its decays
    (per sequence with ``cu_seqlens``; 1 for a sequence absent from the slice). One all-gather of
    the ``(P, f)`` pairs (2 x batch x dim x N values per rank, never the sequence) gives each rank
    its carry-in; each rank but the first runs its slice again from it. The backward gathers one
    pair per rank too (the gradient at each slice's start, and that of ``last_state``) and runs
    the chain backwards. Compute: a rank other than the first runs its slice's selective scan
    twice, forward and backward, and keeps both passes' saved tensors until the backward.

    ``schedule="pipeline"`` runs every slice once instead. The channels are cut into
    ``pipeline_chunks`` groups; rank r scans a group from the state that rank r - 1 sends for
    it (rank 0 from ``initial_state``) and sends the group's last state to rank r + 1, so that
    while rank r scans group k, rank r - 1 scans group k + 1 (point-to-point messages of
    ``batch x group x N`` states; the last rank broadcasts ``last_state``). On W ranks and k
    groups a slice's scan finishes after about (k + W - 1) / k of its own time, against two
    scans with the all-gather; the backward runs the same pipeline from the last rank to the
    first. Each group is a separate call of the op on a W-th of the sequence and a k-th of the
    channels, so it pays when those calls still fill the device.

    Example (``torchrun --nproc-per-node=2 example.py``)::

        import torch, torch.distributed as dist
        import torch_parprims as pp

        dist.init_process_group("nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.cuda.set_device(rank)
        torch.manual_seed(0)  # the same full sequence on every rank, for the illustration
        b, d, L, n = 1, 64, 4096, 16
        u, delta = torch.randn(b, d, L, device="cuda"), torch.rand(b, d, L, device="cuda")
        A = -torch.rand(d, n, device="cuda")
        B, C = torch.randn(b, n, L, device="cuda"), torch.randn(b, n, L, device="cuda")
        part = slice(rank * L // world, (rank + 1) * L // world)
        out, last = pp.distributed.selective_scan(u[..., part], delta[..., part], A, B[..., part], C[..., part])
        out_full, last_full = pp.selective_scan(u, delta, A, B, C)
        assert torch.allclose(out, out_full[..., part], atol=1e-4) and torch.allclose(last, last_full, atol=1e-4)
    """
    import torch.distributed as dist

    for name, value in (("u", u), ("delta", delta), ("A", A), ("B", B), ("C", C)):
        _args.expect_tensor(name, value)
    _check_schedule(schedule, pipeline_chunks)
    spec = ScanSpec(group, dist.get_rank(group), dist.get_world_size(group), _args.expect_bool(
        "delta_softplus", delta_softplus), None if cu_seqlens is None else _args.expect_tensor("cu_seqlens", cu_seqlens))
    if schedule == "all_gather":
        return AllGatherSelectiveScan.apply(spec, u, delta, A, B, C, D, z, delta_bias, initial_state)
    return PipelinedSelectiveScan.apply(spec, pipeline_chunks, u, delta, A, B, C, D, z, delta_bias, initial_state)


