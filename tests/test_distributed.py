"""torch_parprims.distributed.affine_scan and selective_scan: each rank's slice of the result,
the final state and the gradients equal what one process computes on the whole sequence.

Spawning processes costs seconds each, so one spawned job per group size runs every case
(gloo on the CPU with 2 and 4 processes, NCCL with 2 GPUs); a case that fails raises in its
worker, and torch.multiprocessing.spawn re-raises it here with the worker's traceback.
"""
import math
import zlib
from dataclasses import dataclass, replace
from typing import Optional, Tuple

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import torch_parprims as pp


@dataclass(frozen=True)
class Case:
    lengths: Tuple[int, ...]  # the time steps on each rank, in rank order
    shape: Tuple[int, ...] = (2, 3, None)  # b's shape, None at the time dimension
    a_spec: Optional[str] = None  # a's shape: one letter per dim, "1" = size 1, "x" = b's; "scalar"
    dtype: torch.dtype = torch.float64
    init: bool = False
    reverse: bool = False
    log_gates: bool = False
    loss: str = "both"  # both | h (final_state unused) | final (h unused)
    seqs: Optional[Tuple[int, ...]] = None  # packed sequences (their lengths), crossing the ranks' slices
    schedule: str = "all_gather"  # or "pipeline": rows in groups along the largest other dim,
    chunks: Optional[int] = 2  # that many (None: the default, 8 groups on the CPU, at most one a row)

    @property
    def offsets(self):
        return None if self.seqs is None else torch.tensor((0,) + self.seqs).cumsum(0)

    @property
    def dim(self):
        return self.shape.index(None)


def _cases(world):
    """Uneven and empty slices, reverse, log gates, initial states, dim not last, broadcast and
    complex gates, partial losses, packed sequences; the lengths depend on the group size."""
    if world == 2:
        splits = [(7, 7), (0, 9), (11, 0), (1, 30)]
        # Across a boundary; starting exactly at one (1 | 30) or on the empty slice's side.
        packed = [(splits[0], (3, 0, 6, 5)), (splits[3], (1, 0, 30)), (splits[1], (4, 5))]
    else:
        splits = [(5, 0, 17, 3), (0, 4, 4, 0), (0, 0, 0, 6), (9, 1, 0, 12)]
        # Across an empty rank (2 | 10 from rank 0 to 2); at the boundaries; one through all.
        packed = [(splits[0], (2, 10, 0, 13)), (splits[1], (4, 4)), (splits[3], (0, 22, 0))]
    s0, s1, s2, s3 = splits
    (p0, q0), (p1, q1), (p2, q2) = packed
    every = [
        Case(p0, seqs=q0, init=True),
        Case(p1, seqs=q1, init=True, reverse=True, log_gates=True),
        Case(p2, seqs=q2, shape=(2, None, 3), init=True, reverse=True),
        Case(p0, seqs=q0, dtype=torch.complex128, a_spec="1xx", log_gates=True),
        Case(s0),
        Case(s0, init=True, reverse=True),
        Case(s1, init=True),
        Case(s1, init=True, reverse=True, log_gates=True),
        Case(s2, init=True, log_gates=True),
        Case(s2, reverse=True, shape=(2, None, 4), loss="h"),
        Case(s3, shape=(3, None, 2), init=True, reverse=True, log_gates=True),
        Case(s3, shape=(None, 5), init=True, loss="final"),
        Case(s0, a_spec="1xx", init=True),  # gates shared over the batch, sliced along time
        Case(s3, a_spec="xx1", init=True, reverse=True),  # one gate per row for every step
        Case(s1, a_spec="scalar", reverse=True),
        Case(s3, dtype=torch.complex128, init=True),
        Case(s2, dtype=torch.complex128, init=True, reverse=True, log_gates=True),
        # Half inputs: float32 states, an initial state in the input dtype; bfloat16 rounding.
        Case(s3, dtype=torch.bfloat16, init=True, reverse=True),
    ]
    # Every case again on the pipeline schedule (the same answers; groups of rows cut along the
    # state's dims too, packed states leading with the sequence index).
    return every + [replace(case, schedule="pipeline", chunks=2 if i % 2 else None) for i, case in enumerate(every)]


def _full_inputs(case: Case, device):
    """The whole sequence's a, b, initial_state and loss weights, the same on every rank (drawn
    from a seed that only depends on the case)."""
    gen = torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))
    total = sum(case.lengths)
    shape = [total if n is None else n for n in case.shape]
    state_shape = [n for n in case.shape if n is not None]
    if case.seqs is not None:
        state_shape.insert(0, len(case.seqs))

    def draw(shape, low=None):
        real = lambda: torch.rand(shape, generator=gen, dtype=torch.float64)  # noqa: E731
        if low is not None:  # gates of modulus in [low, 1), a fifth negative when real
            mod = low + (1 - low) * real()
            if case.dtype.is_complex:
                angle = 2 * math.pi * real()
                return torch.complex(mod.log(), angle) if case.log_gates else torch.polar(mod, angle)
            sign = torch.where(real() < 0.2, -1.0, 1.0).double()
            return mod.log() if case.log_gates else mod * sign
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        return torch.complex(x, torch.randn(shape, generator=gen, dtype=torch.float64)) if case.dtype.is_complex else x

    if case.a_spec == "scalar":
        a = 0.9
    else:
        a_shape = shape if case.a_spec is None else [1 if c == "1" else n for c, n in zip(case.a_spec, shape)]
        a = draw(a_shape, low=0.3).to(case.dtype).to(device)
    b = draw(shape).to(case.dtype).to(device)
    h0 = draw(state_shape).to(case.dtype).to(device) if case.init else None
    weight_h = draw(shape).to(case.dtype).to(device)
    weight_final = [draw(state_shape).to(case.dtype).to(device) for _ in case.lengths]
    return a, b, h0, weight_h, weight_final


def _leaf(x):
    return x.detach().clone().requires_grad_(True) if isinstance(x, torch.Tensor) else x


def _loss(case, h, final, weight_h, weight_final):
    terms = []
    if case.loss in ("both", "h"):
        terms.append((h * weight_h.conj()).real.sum())
    if case.loss in ("both", "final"):
        terms.append((final * weight_final.conj()).real.sum())
    return sum(terms)


def _time_slice(x, case, rank):
    """This rank's part of a full-sequence tensor (whole when it has size 1 along time)."""
    if not isinstance(x, torch.Tensor) or x.shape[case.dim] == 1:
        return x
    start = sum(case.lengths[:rank])
    return x.narrow(case.dim, start, case.lengths[rank])


def _check_case(case: Case, rank: int, world: int, device):
    a, b, h0, weight_h, weight_final = _full_inputs(case, device)
    dim = case.dim - len(case.shape)  # negative dims, as users write them

    # One process, the whole sequence; final_state is replicated, so its loss weight is the sum
    # of every rank's.
    offsets = None if case.seqs is None else case.offsets.to(device)
    full = [_leaf(a), _leaf(b), _leaf(h0)]
    h_full, final_full = pp.affine_scan(full[0], full[1], dim, full[2], offsets, reverse=case.reverse,
                                        log_gates=case.log_gates)
    _loss(case, h_full, final_full, weight_h, sum(weight_final)).backward()

    # This rank's slice, sequence parallel.
    part = [_leaf(_time_slice(a, case, rank)), _leaf(_time_slice(b, case, rank)), _leaf(h0)]
    local_offsets = None
    if case.seqs is not None:
        local_offsets = pp.distributed.local_cu_seqlens(offsets, sum(case.lengths[:rank]), case.lengths[rank])
    h, final = pp.distributed.affine_scan(part[0], part[1], dim, part[2], reverse=case.reverse,
                                          log_gates=case.log_gates, cu_seqlens=local_offsets,
                                          schedule=case.schedule, pipeline_chunks=case.chunks)
    _loss(case, h, final, _time_slice(weight_h, case, rank), weight_final[rank]).backward()

    # The carry crosses ranks in the state dtype (float32 for half inputs), as it crosses
    # positions in one process; only the rounding of h to bfloat16 may differ by an ulp.
    rtol, atol = (2e-2, 2e-2) if case.dtype == torch.bfloat16 else (1e-11, 1e-12)
    close = dict(rtol=rtol, atol=atol, msg=lambda m: f"{case} on rank {rank}: {m}")
    torch.testing.assert_close(h, _time_slice(h_full, case, rank).detach(), **close)
    torch.testing.assert_close(final, final_full.detach(), **close)
    every_final = [torch.empty_like(final) for _ in range(world)]
    dist.all_gather(every_final, final.detach().contiguous())
    assert all(torch.equal(f, final) for f in every_final), f"{case}: final_state differs between ranks"
    torch.testing.assert_close(part[1].grad, _time_slice(full[1].grad, case, rank), **close)
    if isinstance(a, torch.Tensor):
        grad_a = part[0].grad
        if a.shape[case.dim] == 1:  # the same gate on every rank: each holds its steps' share
            dist.all_reduce(grad_a)
        torch.testing.assert_close(grad_a, _time_slice(full[0].grad, case, rank), **close)
    if h0 is not None:
        # Only the rank that starts the scan reads initial_state; the sum over ranks is its gradient.
        grad_h0 = part[2].grad.clone()
        dist.all_reduce(grad_h0)
        torch.testing.assert_close(grad_h0, full[2].grad, **close)


# ---- the selective scan ----------------------------------------------------------------------


@dataclass(frozen=True)
class SelectiveCase:
    lengths: Tuple[int, ...]  # L on each rank, in rank order
    bc: str = "var"  # var (batch, N, L) | const (dim, N) | group (batch, G, N, L)
    extras: bool = True  # D, z, delta_bias and softplus
    init: bool = False
    loss: str = "both"  # both | out | last
    seqs: Optional[Tuple[int, ...]] = None  # packed sequences (batch 1) crossing the slices
    schedule: str = "all_gather"  # or "pipeline" (in groups of channels: 3 of the 4, or 2 groups of B/C)

    @property
    def batch(self):
        return 1 if self.seqs is not None else 2


def _selective_cases(world):
    if world == 2:
        splits, packed = [(7, 7), (0, 9), (11, 0), (1, 30)], ((4, 10), (3, 0, 6, 5))
    else:
        splits, packed = [(5, 0, 17, 3), (0, 4, 4, 0), (0, 0, 0, 6), (9, 1, 0, 12)], ((5, 0, 17, 3), (2, 10, 0, 13))
    s0, s1, s2, s3 = splits
    return [
        SelectiveCase(s0, init=True),
        SelectiveCase(s1, bc="const", init=True, loss="last"),
        SelectiveCase(s2, bc="group", extras=False),
        SelectiveCase(s3, init=True, loss="out"),
        SelectiveCase(s3, bc="const", extras=False, init=True),
        SelectiveCase(packed[0], seqs=packed[1], init=True),
        SelectiveCase(packed[0], seqs=packed[1], bc="const", extras=False),
        # The pipeline schedule: uneven groups of channels, empty slices, grouped B/C cut at
        # their groups, gradients through last_state only, packed sequences crossing ranks.
        SelectiveCase(s0, init=True, schedule="pipeline"),
        SelectiveCase(s1, bc="const", init=True, loss="last", schedule="pipeline"),
        SelectiveCase(s2, bc="group", extras=False, schedule="pipeline"),
        SelectiveCase(s3, init=True, loss="out", schedule="pipeline"),
        SelectiveCase(packed[0], seqs=packed[1], init=True, schedule="pipeline"),
    ]


def _selective_inputs(case: SelectiveCase, device):
    """The whole sequence's inputs (float64), loss weights for out and last_state, the same on
    every rank."""
    g = torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))
    d, n, groups, L = 4, 3, 2, sum(case.lengths)
    b = case.batch
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)
    x = dict(u=r(b, d, L), delta=torch.rand(b, d, L, generator=g, dtype=torch.float64) * 0.6 + 0.05,
             A=-torch.rand(d, n, generator=g, dtype=torch.float64) - 0.2)
    shape = {"var": (b, n, L), "const": (d, n), "group": (b, groups, n, L)}[case.bc]
    x["B"], x["C"] = r(*shape), r(*shape)
    x["D"], x["z"], x["delta_bias"] = (r(d), r(b, d, L), r(d)) if case.extras else (None, None, None)
    states = len(case.seqs) if case.seqs is not None else b
    x["initial_state"] = r(states, d, n) if case.init else None
    x = {k: (v.to(device) if v is not None else None) for k, v in x.items()}
    return x, r(b, d, L).to(device), r(case.lengths.__len__(), states, d, n).to(device)


def _check_selective_case(case: SelectiveCase, rank: int, world: int, device, group=None):
    """``rank`` and ``world`` within ``group`` (the default group when None)."""
    x, weight_out, weight_last = _selective_inputs(case, device)
    softplus = case.extras
    offsets = None if case.seqs is None else torch.tensor((0,) + case.seqs).cumsum(0).to(device)
    start, length = sum(case.lengths[:rank]), case.lengths[rank]
    timed = lambda name, v: v is not None and v.dim() >= 3 and v.shape[-1] == sum(case.lengths) and not (
        name == "B" and case.bc == "const")

    def loss(out, last, w_out, w_last):
        terms = {"out": (out * w_out).sum(), "last": (last * w_last).sum()}
        return terms["out"] + terms["last"] if case.loss == "both" else terms[case.loss]

    full = {k: _leaf(v) for k, v in x.items()}
    out_full, last_full = pp.selective_scan(**full, delta_softplus=softplus, cu_seqlens=offsets)
    loss(out_full, last_full, weight_out, weight_last.sum(0)).backward()

    part = {k: _leaf(v.narrow(-1, start, length) if timed(k, v) else v) for k, v in x.items()}
    local = None if offsets is None else pp.distributed.local_cu_seqlens(offsets, start, length)
    out, last = pp.distributed.selective_scan(**part, group=group, delta_softplus=softplus, cu_seqlens=local,
                                              schedule=case.schedule, pipeline_chunks=3)
    loss(out, last, weight_out.narrow(-1, start, length), weight_last[rank]).backward()

    close = dict(rtol=1e-10, atol=1e-11, msg=lambda m: f"{case} on rank {rank}: {m}")
    torch.testing.assert_close(out, out_full.narrow(-1, start, length).detach(), **close)
    torch.testing.assert_close(last, last_full.detach(), **close)
    for name, leaf in part.items():
        if leaf is None:
            continue
        want = full[name].grad
        got = leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
        if timed(name, x[name]):
            want = want.narrow(-1, start, length)
        else:  # shared by the ranks (or read by rank 0 only): the sum over the group
            got = got.clone()
            dist.all_reduce(got, group=group)
        torch.testing.assert_close(got, want, **close)


# ---- the Mamba block ---------------------------------------------------------------------------


def _block_cases(world):
    """(slice lengths, packed sequence lengths or None, the scan's schedule): slices shorter
    than the convolution's reach (its d_conv - 1 = 3 taps then span several ranks) and empty
    ones."""
    if world == 2:
        cases = [((7, 7), None), ((1, 12), None), ((0, 9), None), ((4, 10), (3, 0, 6, 5)), ((2, 11), (1, 4, 8))]
    else:
        cases = [((5, 0, 17, 3), None), ((1, 2, 0, 10), None), ((5, 0, 17, 3), (2, 10, 0, 13)),
                 ((1, 1, 1, 9), (2, 1, 9))]
    return [(lengths, seqs, "all_gather") for lengths, seqs in cases] + [
        (lengths, seqs, "pipeline") for lengths, seqs in cases[::2]]


def _check_block_case(lengths, seqs, schedule, rank, world, device):
    from torch_parprims.nn import Mamba

    torch.manual_seed(zlib.crc32(repr((lengths, seqs)).encode()))
    block = Mamba(d_model=8, d_state=4, d_conv=4, expand=2).to(device=device, dtype=torch.float64)
    batch, L = (1 if seqs else 2), sum(lengths)
    x = torch.randn(batch, L, 8, dtype=torch.float64, device=device)
    weight = torch.randn(batch, L, 8, dtype=torch.float64, device=device)
    offsets = None if seqs is None else torch.tensor((0,) + seqs).cumsum(0).to(device)
    start, length = sum(lengths[:rank]), lengths[rank]

    x_full = _leaf(x)
    (block(x_full, cu_seqlens=offsets) * weight).sum().backward()
    want_params = {name: p.grad.clone() for name, p in block.named_parameters()}
    block.zero_grad()

    x_part = _leaf(x[:, start:start + length])
    out = block(x_part, cu_seqlens=offsets, sequence_parallel_group=dist.group.WORLD,
                sequence_parallel_schedule=schedule)
    (out * weight[:, start:start + length]).sum().backward()

    close = dict(rtol=1e-10, atol=1e-11, msg=lambda m: f"block {lengths} {seqs} {schedule} on rank {rank}: {m}")
    with torch.no_grad():
        torch.testing.assert_close(out, block(x, cu_seqlens=offsets)[:, start:start + length], **close)
    torch.testing.assert_close(x_part.grad, x_full.grad[:, start:start + length], **close)
    for name, p in block.named_parameters():
        got = p.grad.clone()
        dist.all_reduce(got)  # each rank holds its share
        torch.testing.assert_close(got, want_params[name], **close)


def _worker(rank, world, init_file, backend):
    if backend == "nccl":
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        for case in _cases(world):
            _check_case(case, rank, world, device)
        for case in _selective_cases(world):
            _check_selective_case(case, rank, world, device)
        if world == 4:
            # Two groups of two ranks each running their own scans: group ranks are not
            # global ranks (the pipeline's messages go to global ranks).
            pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
            mine = pairs[rank // 2]
            for case in _selective_cases(2):
                if case.schedule == "pipeline":
                    _check_selective_case(case, dist.get_rank(mine), 2, device, group=mine)
        for lengths, seqs, schedule in _block_cases(world):
            _check_block_case(lengths, seqs, schedule, rank, world, device)
    finally:
        dist.destroy_process_group()


def _spawn(world, backend, tmp_path):
    mp.spawn(_worker, args=(world, str(tmp_path / "init"), backend), nprocs=world, join=True)


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_matches_one_process(world, tmp_path):
    _spawn(world, "gloo", tmp_path)


@pytest.mark.skipif(torch.cuda.device_count() < 2 or not pp.cuda_kernels_built() or not dist.is_nccl_available(),
                    reason="needs 2 CUDA devices, the CUDA kernels and NCCL")
def test_nccl_matches_one_process(tmp_path):
    _spawn(2, "nccl", tmp_path)


def test_import_needs_no_process_group():
    assert not dist.is_initialized()
    from torch_parprims.distributed import affine_scan  # noqa: F401

    with pytest.raises((RuntimeError, ValueError), match="process group"):
        affine_scan(torch.rand(2, 5), torch.randn(2, 5))


@pytest.mark.parametrize("kwargs, pattern", [(dict(schedule="ring"), "schedule"),
                                             (dict(schedule="pipeline", pipeline_chunks=0), "positive int or None"),
                                             (dict(schedule="pipeline", pipeline_chunks=True), "positive int or None")])
def test_affine_scan_schedule_is_checked_first(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        pp.distributed.affine_scan(torch.rand(2, 5), torch.randn(2, 5), **kwargs)


def test_affine_pipeline_default_groups(device):
    """pipeline_chunks=None: 8 groups on the CPU; on a GPU, two rows a multiprocessor in each
    group, at most 16 groups and at least 1."""
    from torch_parprims._affine_pipeline import default_groups

    b = torch.empty(1, 2048, 4, device=device)
    if device == "cpu":
        assert default_groups(b, -1) == 8
        return
    sms = torch.cuda.get_device_properties(b.device).multi_processor_count
    assert default_groups(b, -1) == max(1, min(16, 2048 // (2 * sms)))
    assert default_groups(torch.empty(3, 4, device=device), 0) == 1
    assert default_groups(torch.empty(4, 1 << 16, device=device), 0) == 16


@pytest.mark.parametrize("kwargs, pattern", [(dict(schedule="ring"), "schedule"),
                                             (dict(schedule="pipeline", pipeline_chunks=0), "pipeline_chunks"),
                                             (dict(schedule="pipeline", pipeline_chunks=2.0), "pipeline_chunks")])
def test_selective_scan_schedule_is_checked_first(kwargs, pattern):
    u, delta, A, B, C = torch.randn(1, 2, 5), torch.rand(1, 2, 5), -torch.rand(2, 3), torch.randn(2, 3), torch.randn(2, 3)
    with pytest.raises(ValueError, match=pattern):
        pp.distributed.selective_scan(u, delta, A, B, C, **kwargs)
