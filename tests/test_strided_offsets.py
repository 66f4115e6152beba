"""Every op that takes packed-sequence offsets (cu_seqlens) reads a non-contiguous view of them
as it reads the same values laid out contiguously: outputs and gradients are identical.

The strided views sit in a larger buffer whose other entries are garbage (negative, huge), so a
path that reads the offsets densely from the data pointer gets wrong sequences or fails the
offsets checks.
"""
import pytest
import torch
import torch.distributed as dist

import torch_parprims as pp

_ops = torch.ops.parprims
LENGTHS = (5, 0, 17, 1, 20)  # an empty sequence, a one-token one; the selective scan checkpoints every 16 steps
TOTAL = sum(LENGTHS)
S = len(LENGTHS)
GARBAGE = (-7, 2**30)


def strided_views(off):
    """``off`` as non-contiguous views: stride 2 from the start, stride 3 at a storage offset."""
    big = torch.empty(2 * len(off), dtype=off.dtype, device=off.device)
    big[::2], big[1::2] = off, GARBAGE[0]
    wide = torch.full((3 * len(off) + 1,), GARBAGE[1], dtype=off.dtype, device=off.device)
    wide[1::3] = off
    views = [big[::2], wide[1::3]]
    assert all(not v.is_contiguous() and torch.equal(v, off) for v in views)
    return views


def leaf(t):
    return t.requires_grad_()


def rand(*shape, device, dtype=torch.float64, grad=True, positive=False):
    t = torch.rand(shape, dtype=dtype) + 0.5 if positive else torch.randn(shape, dtype=dtype)
    t = t.to(device)
    return leaf(t) if grad else t


def results(out, inputs):
    """The outputs, then the gradients of a fixed random projection of the floating outputs
    with respect to ``inputs`` (those that require grad)."""
    outs = [out] if isinstance(out, torch.Tensor) else [o for o in (out or ()) if isinstance(o, torch.Tensor)]
    diff = [i for i in inputs if isinstance(i, torch.Tensor) and i.requires_grad]
    float_outs = [o for o in outs if o.requires_grad]
    if not diff or not float_outs:
        return outs
    gen = torch.Generator().manual_seed(0)
    cot = [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device) for o in float_outs]
    grads = torch.autograd.grad(float_outs, diff, cot, allow_unused=True)
    return outs + [g for g in grads if g is not None]


# ---- the cases: make(device) -> (inputs, run), run(offsets) -> the op's result --------------


def seg_scan(op, dim=0, exclusive=False, reverse=False):
    def make(device):
        x = rand(TOTAL, 3, device=device, positive=op == "mul").movedim(0, dim)
        return [x], lambda o: pp.segmented_scan(x, o, dim, op, exclusive, reverse)
    return make


def scan_with_indices(op):
    def make(device):
        x = rand(TOTAL, 2, device=device, grad=False)
        return [x], lambda o: _ops._scan_with_indices(x, o, 0, op, False, False)
    return make


def bicyclic(device):
    p, q = (torch.randint(0, 4, (2, TOTAL)).to(device) for _ in range(2))
    return [], lambda o: _ops._scan_bicyclic(p, q, o, -1, True, False)


def affine(reverse, log_gates):
    def make(device):
        a = rand(2, TOTAL, device=device, positive=not log_gates)
        b, h0 = rand(2, TOTAL, device=device), rand(S, 2, device=device)
        return [a, b, h0], lambda o: pp.affine_scan(a, b, -1, h0, o, reverse, log_gates)
    return make


def matrix_affine(reverse):
    def make(device):
        A = leaf(0.5 * rand(2, TOTAL, 3, 3, device=device, grad=False))
        b, h0 = rand(2, TOTAL, 3, device=device), rand(S, 2, 3, device=device)
        return [A, b, h0], lambda o: pp.matrix_affine_scan(A, b, -2, h0, o, reverse)
    return make


def selective(dtype):
    def make(device):
        d, n = 4, 8
        u, z, B, C = (rand(1, k, TOTAL, device=device, dtype=dtype) for k in (d, d, n, n))
        delta = leaf((0.5 * rand(1, d, TOTAL, device=device, dtype=dtype, grad=False)).detach())
        cdt = torch.float64 if dtype == torch.float64 else torch.float32
        A = leaf(-rand(d, n, device=device, dtype=cdt, positive=True, grad=False))
        D, bias, h0 = rand(d, device=device, dtype=cdt), rand(d, device=device, dtype=cdt), \
            rand(S, d, n, device=device, dtype=cdt)
        inputs = [u, delta, A, B, C, D, z, bias, h0]
        return inputs, lambda o: pp.selective_scan(u, delta, A, B, C, D, z, bias, True, h0, cu_seqlens=o)
    return make


def seg_compact(capacity):
    def make(device):
        x = rand(TOTAL, 2, device=device)
        mask = (torch.rand(TOTAL) < 0.6).to(device)
        return [x], lambda o: pp.segmented_compact(x, mask, o, capacity, -1.0)
    return make


def seg_reduce(op, dim=0):
    def make(device):
        x = rand(TOTAL, 3, device=device, positive=op == "prod").movedim(0, dim)
        return [x], lambda o: pp.segment_reduce(x, o, op, dim)
    return make


def histogram(weighted):
    def make(device):
        x = rand(TOTAL, device=device, grad=False)
        w = rand(TOTAL, device=device) if weighted else None
        return [w], lambda o: pp.histogram(x, 5, (-1.5, 1.5), w, offsets=o)
    return make


def conv(device):
    x, w, bias = rand(1, 4, TOTAL, device=device), rand(4, 4, device=device), rand(4, device=device)
    return [x, w, bias], lambda o: pp.nn.causal_conv1d(x, w, bias, o, "silu")


def mamba(device):
    block = pp.nn.Mamba(8, d_state=4, device=device, dtype=torch.float64)
    x = rand(1, TOTAL, 8, device=device)

    def run(o):
        cache = block.allocate_inference_cache(S)  # prefill: the states after each sequence
        return (block(x, cu_seqlens=o, inference_cache=cache), *cache)
    return [x, *block.parameters()], run


def plain(fn):
    def make(device):
        return [], fn
    return make


def dist_affine(device):
    group = dist.group.WORLD  # one rank (the test's fixture)
    a, b, h0 = rand(2, TOTAL, device=device, positive=True), rand(2, TOTAL, device=device), rand(S, 2, device=device)
    return [a, b, h0], lambda o: pp.distributed.affine_scan(a, b, -1, h0, group, cu_seqlens=o)


def dist_selective(device):
    group = dist.group.WORLD
    inputs, _ = selective(torch.float64)(device)
    return inputs, lambda o: pp.distributed.selective_scan(*inputs[:8], True, inputs[8], group, cu_seqlens=o)


def dist_conv(device):
    group = dist.group.WORLD
    x, w, bias = rand(1, 4, TOTAL, device=device), rand(4, 4, device=device), rand(4, device=device)
    return [x, w, bias], lambda o: pp.distributed.causal_conv1d(x, w, bias, o, "silu", group)


def dist_mamba(device):
    group = dist.group.WORLD
    block = pp.nn.Mamba(8, d_state=4, device=device, dtype=torch.float64)
    x = rand(1, TOTAL, 8, device=device)
    return [x, *block.parameters()], lambda o: block(x, cu_seqlens=o, sequence_parallel_group=group)


CASES = {
    **{f"segmented_scan-{op}": seg_scan(op) for op in ("add", "mul", "max", "min", "logaddexp")},
    "segmented_scan-add-dim1-exclusive-reverse": seg_scan("add", 1, True, True),
    "segmented_scan-max-exclusive": seg_scan("max", 0, True),
    "_scan_with_indices-max": scan_with_indices("max"),
    "_scan_with_indices-min": scan_with_indices("min"),
    "_scan_bicyclic": bicyclic,
    "affine_scan": affine(False, False),
    "affine_scan-reverse-log": affine(True, True),
    "matrix_affine_scan": matrix_affine(False),
    "matrix_affine_scan-reverse": matrix_affine(True),
    "selective_scan-float64": selective(torch.float64),
    "selective_scan-float32": selective(torch.float32),
    "segmented_compact": seg_compact(None),
    "segmented_compact-capacity": seg_compact(6),
    **{f"segment_reduce-{op}": seg_reduce(op) for op in ("sum", "mean", "max", "min", "prod", "logsumexp")},
    "segment_reduce-sum-dim1": seg_reduce("sum", 1),
    "histogram": histogram(False),
    "histogram-weights": histogram(True),
    "lengths_from_offsets": plain(pp.lengths_from_offsets),
    "flags_from_offsets": plain(lambda o: pp.flags_from_offsets(o, TOTAL)),
    "segment_ids_from_offsets": plain(lambda o: pp.segment_ids_from_offsets(o, TOTAL)),
    "check_offsets": plain(lambda o: pp.check_offsets(o, TOTAL)),
    "local_cu_seqlens": plain(lambda o: pp.distributed.local_cu_seqlens(o, 4, 6)),
    "nn.causal_conv1d": conv,
    "nn.Mamba": mamba,
    "distributed.affine_scan": dist_affine,
    "distributed.selective_scan": dist_selective,
    "distributed.causal_conv1d": dist_conv,
    "distributed.Mamba": dist_mamba,
}


def assert_same(actual, expected, device):
    assert len(actual) == len(expected)
    for k, (a, e) in enumerate(zip(actual, expected)):
        if device == "cpu" or not (e.is_floating_point() or e.is_complex()):
            assert a.dtype == e.dtype and torch.equal(a, e), f"result {k} differs:\n{a}\nexpected\n{e}"
        else:  # CUDA float scans may round differently between runs by an ulp
            torch.testing.assert_close(a, e, rtol=1e-5 if e.dtype == torch.float32 else 1e-12, atol=1e-12)


@pytest.fixture
def one_rank_group(device, tmp_path):
    """A process group of one rank (gloo on the CPU, NCCL on CUDA), destroyed afterwards."""
    backend = "nccl" if device.startswith("cuda") else "gloo"
    dist.init_process_group(backend, init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("off_dtype", [torch.int32, torch.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("name", list(CASES))
def test_strided_offsets_read_as_contiguous(name, off_dtype, device, request):
    if name.startswith("distributed."):
        request.getfixturevalue("one_rank_group")
    inputs, run = CASES[name](device)
    off = torch.tensor((0,) + LENGTHS).cumsum(0).to(device, off_dtype)
    expected = results(run(off), inputs)
    # Validation on (a host copy of CUDA offsets) and off (CUDA's default; the CPU always checks).
    for checks in (True, False):
        pp.set_checks(checks)
        for view in strided_views(off):
            assert_same(results(run(view), inputs), expected, device)
