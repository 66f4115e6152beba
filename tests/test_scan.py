"""scan: reference comparison, gradcheck, opcheck and torch.compile from one sample table."""
import itertools
from dataclasses import dataclass, replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torch_parprims as pp
from torch_parprims import reference as ref

_ops = torch.ops.parprims

from helpers import (
    COMPLEX, CPU_CHUNK, FLOATS, GPU_MULTI_TILE, INTS, NONDET_TOL, OPCHECK_UTILS, OPS, VIEWS, assert_close,
    assert_same_as_eager, draw, finite_mask_fn, grad_leaf, grad_samples, grad_weights, magnitude, numel, rel_err,
    sample_params, scan_scale, strided_copy, with_layout)

SIZES = (0, 1, 31, 32, 33, 2047, 2048, 2049)


@dataclass(frozen=True)
class ScanSample:
    shape: tuple
    dim: int = -1
    op: str = "add"
    dtype: torch.dtype = torch.float32
    exclusive: bool = False
    reverse: bool = False
    view: str = "contiguous"
    values: str = "normal"  # normal | nan | inf | ties | zeros (see helpers.draw)
    slow: bool = False  # only in the exhaustive run
    check: bool = False  # opcheck in the default run
    compile: bool = False  # torch.compile in the default run

    def __str__(self):
        flags = "".join(c for c, on in (("E", self.exclusive), ("R", self.reverse)) if on)
        shape = "x".join(map(str, self.shape)) or "scalar"
        dtype = str(self.dtype).replace("torch.", "")
        return f"{self.op}-{shape}-d{self.dim}-{dtype}-{flags or 'I'}-{self.view}-{self.values}"

    def make(self, device):
        x = draw(self.shape, self.op, self.dtype, self.values, device)
        return with_layout(x, self.view, self.dim)

    @property
    def differentiable(self):
        return self.dtype.is_floating_point or self.dtype.is_complex


def _samples():
    S = ScanSample
    out = []
    # Every op, exclusive and reverse, on a small odd shape; the first few are opcheck'ed.
    for op, (ex, rv) in itertools.product(OPS, itertools.product((False, True), repeat=2)):
        out.append(S((3, 33), -1, op, exclusive=ex, reverse=rv, check=(ex == rv)))
    # Odd sizes around warp and tile boundaries.
    for n in SIZES:
        for op in ("add", "mul", "max", "logaddexp"):
            out.append(S((2, n), -1, op, exclusive=n % 2 == 1, reverse=op in ("max", "add") and n % 3 == 0))
    out.append(S((2, GPU_MULTI_TILE + 3), -1, "add", reverse=True, slow=True))
    out.append(S((2, GPU_MULTI_TILE + 3), -1, "logaddexp", exclusive=True, slow=True))
    # Few long rows: on CUDA, rows cut into spans (a summary pass, a carry kernel, the full pass).
    for op, (ex, rv) in zip(("add", "max", "logaddexp", "mul"), itertools.product((False, True), repeat=2)):
        out.append(S((5, 40000), -1, op, exclusive=ex, reverse=rv))
    out.append(S((300001,), 0, "add", torch.float64, exclusive=True, reverse=True))
    # Rows of many spans, ragged at their ends.
    out.append(S((2, 1000003), -1, "add", torch.bfloat16, reverse=True))
    out.append(S((2, 1000003), -1, "max", torch.float32, exclusive=True))
    # Every dim of a 3-D tensor in every layout.
    for i, (dim, view) in enumerate(itertools.product((0, 1, 2, -1, -2), VIEWS)):
        op = OPS[i % len(OPS)]
        out.append(S((6, 5, 33), dim, op, exclusive=i % 3 == 0, reverse=i % 2 == 0, view=view,
                     check=(dim, view) in ((0, "transpose"), (1, "step"))))
    out.append(S((4, 3, 2, 5), 2, "mul", view="transpose"))
    # Every dtype of every op.
    for dtype, op in itertools.product(FLOATS, OPS):
        out.append(S((3, 257), -1, op, dtype, exclusive=op in ("max", "mul"), reverse=op in ("min", "add"),
                     check=dtype == torch.bfloat16 and op == "add"))
    for dtype, op, ex in itertools.product(INTS, ("add", "max", "min"), (False, True)):
        out.append(S((3, 100), 1, op, dtype, exclusive=ex, reverse=not ex,
                     check=dtype == torch.int32 and op == "add" and not ex))
    for dtype in COMPLEX:
        out.append(S((3, 100), -1, "add", dtype))
        out.append(S((4, 40), 0, "add", dtype, exclusive=True, reverse=True, view="transpose",
                     check=dtype == torch.complex128))
    # Special values.
    for op, ex in itertools.product(OPS, (False, True)):
        out.append(S((3, 40), -1, op, exclusive=ex, reverse=not ex, values="nan"))
    for op in ("max", "min", "logaddexp", "add"):
        out.append(S((3, 40), -1, op, reverse=op == "min", exclusive=op == "max", values="inf"))
    for op, dtype in itertools.product(("max", "min"), (torch.float32, torch.float16, torch.int64)):
        out.append(S((3, 40), -1, op, dtype, values="ties", exclusive=dtype == torch.float16))
    for dtype, (ex, rv) in itertools.product((torch.float32, torch.float64), itertools.product((False, True), repeat=2)):
        out.append(S((3, 20), -1, "mul", dtype, exclusive=ex, reverse=rv, values="zeros"))
    # Degenerate shapes.
    for op in ("add", "max", "logaddexp"):
        out.append(S((), 0, op))
        out.append(S((), -1, op, exclusive=True))
    out += [S((0, 5), 1, "add"), S((5, 0), 0, "mul"), S((1,), 0, "min", exclusive=True),
            S((7, 1, 1), 0, "add", reverse=True), S((1, 1, 9), 2, "max"), S((0,), 0, "logaddexp")]
    # Long rows: the chunked CPU path (one row longer than two chunks) and GPU multi-tile rows.
    n = 2 * CPU_CHUNK + 5
    for op in OPS:
        out.append(S((1, n), -1, op, exclusive=op in ("max", "mul"), reverse=op in ("add", "min"),
                     slow=op not in ("add", "max")))
    out.append(S((n,), 0, "add", torch.float64, exclusive=True))
    out.append(S((n, 2), 0, "max", view="transpose", reverse=True))
    out.append(S((n, 1), 0, "add", torch.int32, exclusive=True, reverse=True))
    for op, (ex, rv) in itertools.product(OPS, itertools.product((False, True), repeat=2)):
        out.append(S((GPU_MULTI_TILE + 3,), 0, op, exclusive=ex, reverse=rv, slow=True))
        out.append(S((3, GPU_MULTI_TILE + 3), 1, op, torch.bfloat16, exclusive=ex, reverse=rv, slow=True))
    # Enough rows, each a tile or more long, for the GPU's row-loop kernel (a block per row):
    # ragged last tiles, both directions, wide and element accesses.
    for op, dtype, (ex, rv) in (("add", torch.float32, (False, False)), ("logaddexp", torch.float32, (True, True)),
                                ("max", torch.int64, (True, False)), ("add", torch.bfloat16, (False, True)),
                                ("mul", torch.float64, (False, True))):
        out.append(S((300, 2049), -1, op, dtype, exclusive=ex, reverse=rv))
    out.append(S((300, 1500), -1, "add", view="step", reverse=True))
    # More rows than any GPU runs blocks at once: float32 rows take a block each, others a
    # resident block walking several (kBlockPerRow in the CUDA policy).
    out.append(S((4000, 600), -1, "add", exclusive=True, reverse=True))
    out.append(S((4000, 1100), -1, "max", torch.bfloat16))
    # Short rows (a warp's tile up to the row loop's blocks' tile): on CUDA, one-warp blocks, each
    # walking several rows (more rows than run at once), aligned for wide loads or not.
    for shape, op, dtype, (ex, rv), view in (((4000, 256), "add", torch.float32, (False, False), "contiguous"),
                                             ((4000, 1000), "max", torch.bfloat16, (True, True), "contiguous"),
                                             ((3000, 1500), "add", torch.bfloat16, (True, False), "contiguous"),
                                             ((3500, 300), "mul", torch.float64, (False, True), "contiguous"),
                                             ((3500, 400), "add", torch.int64, (True, False), "contiguous"),
                                             ((3500, 260), "add", torch.complex64, (False, False), "contiguous"),
                                             ((3500, 511), "min", torch.float16, (False, True), "contiguous"),
                                             ((4000, 300), "add", torch.float32, (True, True), "step")):
        out.append(S(shape, -1, op, dtype, exclusive=ex, reverse=rv, view=view))
    # Half inputs in the row loop, every row's start aligned for wide loads.
    out.append(S((300, 2048), -1, "max", torch.float16, reverse=True))
    # torch.compile samples.
    out.append(S((4, 37), 1, "mul", torch.float64, compile=True))
    out.append(S((37, 4), 0, "logaddexp", torch.float32, reverse=True, compile=True))
    return out


SAMPLES = _samples()
# The differentiable samples in double precision, small enough for gradcheck.
GRAD_SAMPLES = grad_samples(SAMPLES, lambda s: s.differentiable and s.values not in ("nan", "inf", "ties")
                            and numel(s.shape) <= 2500)


# ---- reference comparison ---------------------------------------------------------------


@pytest.mark.parametrize("s", sample_params(SAMPLES))
def test_scan_matches_reference(s, device):
    x = s.make(device)
    y = pp.scan(x, s.dim, s.op, s.exclusive, s.reverse)
    expected = ref.scan(x, s.dim, s.op, s.exclusive, s.reverse)
    assert y.device == x.device
    assert y.dtype == (torch.int64 if s.op == "add" and s.dtype in INTS else s.dtype)
    scale = scan_scale(x, None, s.dim, s.op, s.exclusive, s.reverse, expected) if s.differentiable else None
    assert_close(y, expected, scale=scale)
    # The dispatcher op is the same function (equal up to the run-to-run rounding of long float
    # rows on CUDA; see NONDET_TOL).
    y2 = torch.ops.parprims.scan(x, s.dim, s.op, s.exclusive, s.reverse)
    assert_close(y2, y, scale=scale if scale is not None else 0)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("dim", (0, 1, -1))
def test_integer_add_equals_cumsum(dtype, dim, device):
    x = draw((37, 45), "add", dtype, device=device)
    y = pp.scan(x, dim, "add")
    assert y.dtype == torch.int64
    assert torch.equal(y, torch.cumsum(x, dim))


def test_int64_add_does_not_overflow_to_32_bits(device):
    x = torch.full((5,), 3 << 31, dtype=torch.int64, device=device) + torch.arange(5, device=device)
    assert torch.equal(pp.scan(x, 0), torch.cumsum(x, 0))


@pytest.mark.parametrize("dtype,op", ((torch.int32, "add"), (torch.int64, "max"), (torch.int32, "min")))
@pytest.mark.parametrize("exclusive,reverse", ((False, False), (True, True), (False, True)))
def test_few_long_rows_are_exact(dtype, op, exclusive, reverse, device):
    """Few long rows (on CUDA, cut into hundreds of spans each, the last one ragged): integer
    results are exact, so a span's carry taken from the wrong spans, or a span scanned twice or
    not at all, shows as a mismatch."""
    x = torch.randint(-1000, 1000, (3, 1500007), dtype=dtype, device=device)
    y = pp.scan(x, 1, op, exclusive, reverse)
    assert torch.equal(y, ref.scan(x, 1, op, exclusive, reverse))


@pytest.mark.parametrize("op", ("max", "min"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.bfloat16, torch.float64))
@pytest.mark.parametrize("reverse", (False, True))
def test_nan_propagates_through_max_min(op, dtype, reverse, device):
    x = torch.randn(4, 50, device=device).to(dtype)
    x[0, 10] = x[1, 0] = x[2, 49] = float("nan")
    y = pp.scan(x, 1, op, reverse=reverse)
    expected = ref.scan(x, 1, op, reverse=reverse)
    assert_close(y, expected, scale=0)
    after = y[0, 10:] if not reverse else y[0, :11]
    assert after.isnan().all() and not (y[3].isnan().any())


def test_no_nan_appears_without_nan_input(device):
    for op in OPS:
        x = draw((8, 1000), op, torch.float32, device=device)
        for ex, rv in itertools.product((False, True), repeat=2):
            y = pp.scan(x, 1, op, ex, rv)
            assert not y.isnan().any(), (op, ex, rv)


def test_exclusive_identities(device):
    x = torch.randn(3, 5, device=device)
    first = lambda op, rv=False: pp.scan(x, 1, op, True, rv)[:, -1 if rv else 0]
    assert (first("add") == 0).all() and (first("mul") == 1).all()
    assert (first("max") == float("-inf")).all() and (first("min", True) == float("inf")).all()
    assert (first("logaddexp", True) == float("-inf")).all()
    for dtype in (torch.int32, torch.int64):
        xi = torch.randint(-5, 5, (2, 4), dtype=dtype, device=device)
        assert (pp.scan(xi, 1, "max", True)[:, 0] == torch.iinfo(dtype).min).all()
        assert (pp.scan(xi, 1, "min", True)[:, 0] == torch.iinfo(dtype).max).all()
        assert pp.scan(xi, 1, "max", True).dtype == dtype
    xb = torch.tensor([[True, False], [False, True]], device=device)
    assert pp.scan(xb, 1, "max", True)[:, 0].tolist() == [False, False]
    assert pp.scan(xb, 1, "min", True)[:, 0].tolist() == [True, True]


# ---- gradients ------------------------------------------------------------------------------


@pytest.mark.parametrize("s", sample_params(GRAD_SAMPLES))
def test_scan_gradcheck(s, device):
    x, to_input = grad_leaf(s.make(device))
    fn = lambda x: pp.scan(to_input(x), s.dim, s.op, s.exclusive, s.reverse)
    if s.exclusive and s.op in ("max", "min", "logaddexp"):
        fn = finite_mask_fn(fn, x)
    assert torch.autograd.gradcheck(fn, (x,), fast_mode=x.numel() > 300, nondet_tol=NONDET_TOL)


@pytest.mark.parametrize("op", ("add", "mul", "logaddexp"))
def test_cpu_long_row_accumulates_in_double(op):
    """A float32 row of 2^20 on the CPU is as accurate as torch's own CPU scans: one rounding of
    a double accumulation (about 3e-8), where float32 accumulation loses 100-700x more."""
    n = 1 << 20
    x = {"add": torch.randn(n), "mul": torch.exp(0.01 * torch.randn(n)), "logaddexp": 3 * torch.randn(n)}[op]
    expected = ref.scan(x.double(), 0, op)
    assert rel_err(pp.scan(x, 0, op), expected) < 1e-7
    offsets = torch.tensor([0, 5, n // 2, n])
    expected = torch.cat([ref.scan(x[i:j].double(), 0, op) for i, j in zip(offsets[:-1], offsets[1:])])
    assert rel_err(pp.segmented_scan(x, offsets, 0, op), expected) < 1e-7


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
@pytest.mark.parametrize("op", ("add", "mul", "max", "logaddexp"))
@pytest.mark.parametrize("exclusive,reverse", ((False, False), (True, False), (False, True), (True, True)))
def test_cpu_half_rows_in_blocks_equal_elementwise(op, dtype, exclusive, reverse):
    """On the CPU, half rows with unit stride are converted a block of positions at a time (the
    rest, and strided rows, one element at a time), with the same combines in the same order:
    the two give the same bits, around every block edge, in whole rows, packed sequences (also
    of one long row, whose chunks run side by side) and long rows cut into chunks; and the
    values agree with the float64 reference (but for float16 products of a long row, which pass
    its largest value where the two round differently)."""
    def check(x, offsets=None, against_reference=True):
        def run(t):
            if offsets is None:
                return pp.scan(t, -1, op, exclusive, reverse)
            return pp.segmented_scan(t, offsets, -1, op, exclusive, reverse)
        got, elementwise = run(x), run(strided_copy(x))
        assert torch.equal(got.view(torch.int16), elementwise.view(torch.int16))
        if not against_reference:
            return
        expected = ref.segmented_scan(x, offsets, -1, op, exclusive, reverse)
        assert_close(got, expected, scale=scan_scale(x, offsets, -1, op, exclusive, reverse, expected))

    for n in (1, 2, 63, 64, 65, 66, 128, 129, 130, 200):
        check(draw((9, n), op, dtype))  # two groups of four rows side by side, and one alone
    check(draw((4, 600), op, dtype), torch.tensor([0, 70, 70, 135, 136, 330, 600]))
    n = 2 * CPU_CHUNK + 77
    x = draw((1, n), op, dtype)
    overflows = op == "mul" and dtype == torch.float16
    check(x, against_reference=not overflows)
    check(x, torch.tensor([0, 100, 100, CPU_CHUNK + 3, CPU_CHUNK + 5, n]), against_reference=not overflows)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.bfloat16))
@pytest.mark.parametrize("op", OPS)
def test_scan_backward_matches_reference(op, dtype, device):
    x = draw((8, 1000), op, dtype, device=device).requires_grad_()
    y = pp.scan(x, 1, op, exclusive=op == "max", reverse=op == "mul")
    w = grad_weights(y)
    (gx,) = torch.autograd.grad(y, x, w)
    xr = x.detach().double().requires_grad_()
    yr = ref.scan(xr, 1, op, exclusive=op == "max", reverse=op == "mul")
    (gr,) = torch.autograd.grad(yr, xr, w.double())
    assert gx.dtype == dtype
    # Norm-wise, a few roundings of the output dtype: half inputs compute in float32, and so do
    # their gradients. float32: 1e-4 of the largest gradient (logaddexp's log-space backward).
    rtol = {torch.float32: 1e-4, torch.float16: 4e-3, torch.bfloat16: 2e-2}[dtype]
    assert_close(gx, gr, scale=magnitude(gr), rtol=rtol, what="grad")


@pytest.mark.parametrize("op", ("max", "min"))
@pytest.mark.parametrize("reverse", (False, True))
def test_max_min_gradient_goes_to_first_tie(op, reverse, device):
    x = torch.tensor([1.0, 3.0, 3.0, 2.0, 3.0], device=device)
    if op == "min":
        x = -x
    x.requires_grad_()
    pp.scan(x, 0, op, reverse=reverse).sum().backward()
    # Scan order sees the ties 1, 2, 4 (forward) or 4, 2, 1 (reverse); the first one takes all.
    expected = [1.0, 4.0, 0.0, 0.0, 0.0] if not reverse else [0.0, 0.0, 0.0, 0.0, 5.0]
    assert x.grad.tolist() == expected


class _LibraryOpLog(TorchDispatchMode):
    """Records the library's ops that run under it."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "parprims" in str(func):
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("op", ("max", "min"))
@pytest.mark.parametrize("packed", (False, True))
def test_max_min_backward_scans_once(op, packed, device):
    """No second max/min scan and no indices: the backward sums each run of equal outputs in one
    scan read from the output alone (_scan_extreme_backward), with or without packed sequences,
    whether the wrapper or the op ran the forward; the same gradient, bitwise (no atomics)."""
    x = torch.randn(4, 300, device=device, requires_grad=True)
    offsets = torch.tensor([0, 7, 7, 120, 300], device=device)
    w = torch.randn(4, 300, device=device)

    def run(fn):
        y = fn(x, offsets, 1, op, True, False) if packed else fn(x, 1, op, True, False)
        with _LibraryOpLog() as log:
            (g,) = torch.autograd.grad(y, x, w)
        return y, g, log.ops

    y, g, backward_ops = run(pp.segmented_scan if packed else pp.scan)
    y_op, g_op, op_backward_ops = run(_ops.segmented_scan if packed else _ops.scan)
    for ops in (backward_ops, op_backward_ops):
        assert not any("_scan_with_indices" in o for o in ops)
        assert sum("_scan_extreme_backward" in o for o in ops) == 1
    assert torch.equal(y, y_op)
    assert torch.equal(g, g_op)


@pytest.mark.parametrize("op", ("max", "min"))
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("packed", (False, True))
def test_max_min_gradient_with_ties_and_nans(op, exclusive, reverse, packed, device):
    """Each output's gradient goes to the element it came from, with many ties (values drawn
    from three) and NaNs (the first NaN wins): against a float64 scatter to the reference's
    indices. gradcheck cannot see ties; the backward's runs of equal sources can."""
    x = torch.randint(0, 3, (5, 700), device=device).to(torch.float32)
    x[1, 100] = x[3, 650] = float("nan")
    x.requires_grad_(True)
    w = torch.randn(5, 700, device=device)
    offsets = torch.tensor([0, 1, 1, 300, 699, 700], device=device) if packed else None
    if packed:
        y = pp.segmented_scan(x, offsets, 1, op, exclusive, reverse)
    else:
        y = pp.scan(x, 1, op, exclusive, reverse)
    (grad,) = torch.autograd.grad(y, x, w)
    _, index = ref.scan_with_indices(x.detach(), offsets, 1, op, exclusive, reverse)
    taken = index >= 0
    want = torch.zeros(5, 700, dtype=torch.float64, device=device)
    want.scatter_add_(1, index.clamp(min=0), torch.where(taken, w.double(), 0))
    torch.testing.assert_close(grad.double(), want, rtol=1e-6, atol=1e-4)


# Shapes for each kernel of the backward's scan: rows that fill the GPU (the row loop), few short
# rows (flat kernel), one long row (cut into spans), a strided scanned dim (the column kernel),
# rows of odd length (runs read element by element at their ends).
EXTREME_LAYOUTS = [((5, 700), 1), ((600, 2048), 1), ((2, 70001), 1), ((900, 40), 0), ((300, 1001), 1), ((3, 5), 1)]


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float64))
@pytest.mark.parametrize("shape,dim", EXTREME_LAYOUTS)
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("packed", (False, True))
def test_logaddexp_on_every_kernel(shape, dim, exclusive, reverse, packed, dtype, device):
    """logaddexp on each kernel (the GPU scans (max, rest) pairs): values spread over hundreds,
    runs of -inf (the identity) at a row's start and inside, a row with a +inf and a row with a
    NaN, packed sequences of 0 to 70 steps and a long one; against the float64 reference."""
    torch.manual_seed(sum(shape) + 5 * exclusive + 3 * reverse + packed)
    x = 30 * torch.randn(shape, dtype=torch.float64)
    x.view(-1)[:: 97] -= 400  # far below their neighbours: their terms underflow in float32
    x.select(dim, 0).fill_(float("-inf"))
    x.view(-1)[x.numel() // 5 : x.numel() // 5 + 9] = float("-inf")
    x.view(-1)[x.numel() // 3] = float("inf")
    x.view(-1)[(2 * x.numel()) // 3] = float("nan")
    x = x.to(dtype)
    offsets = packed_offsets(shape[dim]) if packed else None
    expected = ref.segmented_scan(x.double(), offsets, dim, "logaddexp", exclusive, reverse)
    xd = x.to(device)
    if packed:
        y = pp.segmented_scan(xd, offsets.to(device), dim, "logaddexp", exclusive, reverse)
    else:
        y = pp.scan(xd, dim, "logaddexp", exclusive, reverse)
    assert y.dtype == dtype
    assert_close(y, expected, scale=scan_scale(x, offsets, dim, "logaddexp", exclusive, reverse, expected))


def packed_offsets(n):
    """Sequences of 1, 0, 2, 0, 1, 3, ... steps, then a long one and an empty one at the end."""
    lengths = [1, 0, 2, 0, 1, 3, 8, 5, 0, 70][: max(1, min(10, n // 8))]
    cut = [0]
    for k in lengths:
        cut.append(min(cut[-1] + k, n // 2))
    return torch.tensor(cut + [n, n])


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float64))
@pytest.mark.parametrize("shape,dim", EXTREME_LAYOUTS)
@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("packed", (False, True))
def test_max_min_backward_on_every_kernel(shape, dim, exclusive, reverse, packed, dtype, device):
    """The backward's scan over the runs of equal outputs on each kernel, with ties on every
    step (values drawn from four), a NaN, -inf (max's identity) at a row's start and an
    infinite gradient (it must stay in its own run); packed sequences of 0 to 70 steps and a
    long one: against a float64 scatter to the reference's indices."""
    torch.manual_seed(sum(shape) + 7 * exclusive + 3 * reverse + packed)
    x = torch.randint(0, 4, shape).to(dtype)
    x.view(-1)[x.numel() // 3] = float("nan")
    x.select(dim, 0).view(-1)[0] = float("-inf")
    w = torch.randn(shape, dtype=torch.float64).to(dtype).double()
    w.view(-1)[x.numel() // 2] = float("inf")
    offsets = packed_offsets(shape[dim]) if packed else None
    _, index = ref.scan_with_indices(x, offsets, dim, "max", exclusive, reverse)
    want = torch.zeros(shape, dtype=torch.float64)
    want.scatter_add_(dim, index.clamp(min=0), torch.where(index >= 0, w, 0))
    xd = x.to(device).requires_grad_()
    if packed:
        y = pp.segmented_scan(xd, offsets.to(device), dim, "max", exclusive, reverse)
    else:
        y = pp.scan(xd, dim, "max", exclusive, reverse)
    (grad,) = torch.autograd.grad(y, xd, w.to(device, dtype))
    # Runs of up to 70001 gradients of about 1 (sums of a few hundred): float32 sums (the GPU's,
    # and bfloat16's) round each addition, and bfloat16 rounds the result.
    rtol, atol = {torch.float64: (1e-12, 1e-10), torch.float32: (1e-5, 1e-3), torch.bfloat16: (1e-2, 1e-2)}[dtype]
    torch.testing.assert_close(grad.cpu().double(), want, rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, True)])
def test_max_backward_strided_views(exclusive, reverse, device):
    """Gradients and outputs read through strides (every second element, a transposed view)."""
    x = torch.randint(0, 5, (64, 600), device=device).float().requires_grad_()
    view = x[:, ::2]
    y = pp.scan(view, 1, "min", exclusive, reverse)
    w = torch.randn(300, 64, device=device).t()
    (grad,) = torch.autograd.grad(y, x, w)
    (want,) = torch.autograd.grad(pp.scan(view.contiguous(), 1, "min", exclusive, reverse), x, w.contiguous())
    assert torch.equal(grad, want)
    assert torch.equal(grad[:, 1::2], torch.zeros_like(grad[:, 1::2]))


@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("packed", (False, True))
def test_double_backward_of_max(exclusive, reverse, packed, device):
    offsets = torch.tensor([0, 1, 1, 4, 9, 9], device=device) if packed else None

    def scan(t, op):
        return pp.segmented_scan(t, offsets, 1, op, exclusive, reverse) if packed else pp.scan(t, 1, op, exclusive, reverse)

    x = torch.randn(3, 9, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradgradcheck(lambda t: scan(t, "max"), (x,))
    # With ties: the backward's derivative gathers from each output's source.
    x = torch.randint(0, 3, (3, 9), device=device).double().requires_grad_()
    g = torch.randn(3, 9, dtype=torch.float64, device=device, requires_grad=True)
    (dx,) = torch.autograd.grad(scan(x, "min"), x, g, create_graph=True)
    v = torch.randn(3, 9, dtype=torch.float64, device=device)
    (gg,) = torch.autograd.grad(dx, g, v)
    _, index = ref.scan_with_indices(x.detach(), offsets, 1, "min", exclusive, reverse)
    assert torch.equal(gg, torch.where(index >= 0, v.gather(1, index.clamp(min=0)), 0))


@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("packed", (False, True))
def test_logaddexp_backward_is_one_affine_scan(exclusive, reverse, packed, device):
    """logaddexp's gradient is one reverse affine scan (no logaddexp scans) with gates in [0, 1],
    whatever the spread of the values (far apart, their exp(x - y) underflow): against the float64
    reference's autograd; the double backward differentiates the log-space composition."""
    offsets = torch.tensor([0, 1, 1, 40, 300, 300], device=device) if packed else None

    def scan(t):
        if packed:
            return pp.segmented_scan(t, offsets, 1, "logaddexp", exclusive, reverse)
        return pp.scan(t, 1, "logaddexp", exclusive, reverse)

    torch.manual_seed(3 + 2 * exclusive + reverse)
    x0 = 20 * torch.randn(4, 300, dtype=torch.float64)
    x0[:, ::7] -= 300
    w = torch.randn(4, 300, dtype=torch.float64)
    for dtype in (torch.float32, torch.float64):
        x = x0.to(device, dtype).requires_grad_()
        y = scan(x)
        with _LibraryOpLog() as log:
            (g,) = torch.autograd.grad(y, x, w.to(device, dtype))
        assert sum("_affine_scan_exclusive" in o for o in log.ops) == 1
        assert not any(o in ("parprims.scan.default", "parprims.segmented_scan.default") for o in log.ops), log.ops
        xr = x0.clone().requires_grad_()
        yr = ref.segmented_scan(xr, offsets, 1, "logaddexp", exclusive, reverse)
        (want,) = torch.autograd.grad(yr, xr, w)
        assert_close(g, want, scale=magnitude(want), rtol=1e-5 if dtype == torch.float32 else 1e-12, what="grad")
    x = torch.randn(3, 9, dtype=torch.float64, device=device, requires_grad=True)
    offsets = torch.tensor([0, 1, 1, 4, 9, 9], device=device) if packed else None
    if exclusive:  # (its first output is -inf)
        assert torch.autograd.gradgradcheck(finite_mask_fn(scan, x), (x,))
    else:
        assert torch.autograd.gradgradcheck(scan, (x,))


def test_mul_gradient_with_zeros(device):
    x = torch.tensor([2.0, 0.0, 3.0, 0.0, 5.0, -1.5], dtype=torch.float64, device=device, requires_grad=True)
    for ex, rv in itertools.product((False, True), repeat=2):
        assert torch.autograd.gradcheck(lambda t: pp.scan(t, 0, "mul", ex, rv), (x,), nondet_tol=NONDET_TOL)
        (g,) = torch.autograd.grad(pp.scan(x, 0, "mul", ex, rv).sum(), x)
        (gr,) = torch.autograd.grad(ref.scan(x, 0, "mul", ex, rv).sum(), x)
        assert_close(g, gr, scale=gr.abs() + 1)


# ---- opcheck and torch.compile ---------------------------------------------------------------

# opcheck compares eager and traced outputs without equal_nan: samples with NaN/inf inputs are left out.
@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if not s.slow and s.values not in ("nan", "inf")], "check"))
def test_scan_opcheck(s, device):
    x = s.make(device)
    if s.differentiable:
        x.requires_grad_()
    torch.library.opcheck(torch.ops.parprims.scan.default, (x, s.dim, s.op, s.exclusive, s.reverse),
                          test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, True)])
def test_scan_extreme_backward_opcheck(exclusive, reverse, device):
    """The max/min backward's op: schema, fake kernel, autograd (its own derivative, which
    double backward takes) and tracing, on outputs with ties."""
    out = pp.scan(torch.randint(0, 4, (6, 130), device=device).double(), 1, "max", exclusive, reverse)
    grad = torch.randn(6, 130, dtype=torch.float64, device=device, requires_grad=True)
    for offsets in (None, torch.tensor([0, 3, 3, 50, 130], device=device)):
        torch.library.opcheck(_ops._scan_extreme_backward.default, (grad, out, offsets, 1, exclusive, reverse),
                              test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if s.differentiable and not s.slow], "compile"))
def test_scan_compile(s, device):
    torch._dynamo.reset()
    fn = torch.compile(lambda x: pp.scan(x, s.dim, s.op, s.exclusive, s.reverse), fullgraph=True, dynamic=True)
    for shape in (s.shape, tuple(n + 3 for n in s.shape)):  # a second size: no recompile needed
        x = replace(s, shape=shape).make(device).requires_grad_()
        y = fn(x)
        w = grad_weights(y)
        (g,) = torch.autograd.grad(y, x, w)
        y_eager = pp.scan(x, s.dim, s.op, s.exclusive, s.reverse)
        (g_eager,) = torch.autograd.grad(y_eager, x, w)
        assert_same_as_eager((y,), (y_eager,), (g,), (g_eager,))


def test_double_backward_of_mul_raises_a_clear_error(device):
    x = torch.randn(7, dtype=torch.float64, device=device, requires_grad=True)
    (g,) = torch.autograd.grad(pp.scan(x, 0, "mul").sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward"):
        g.sum().backward()


# ---- more than 2^31 elements (GPU only: tens of GB) --------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("shape", (((1 << 31) + 3,), (1024, (1 << 21) + 1)), ids=("one_row", "many_rows"))
def test_scan_beyond_2_to_31_elements(shape, device):
    """Index arithmetic past 2^31: one row longer than 2^31 (the row loop cut into spans) and 2^31 + 1024
    elements in rows (the row-loop kernel). Ones of int32 summed into int64 are exact: the
    output at position t of a row is t + 1."""
    if not device.startswith("cuda"):
        pytest.skip("needs about 26 GB of device memory; the CPU paths index with int64 throughout")
    x = torch.ones(shape, dtype=torch.int32, device=device)
    y = pp.scan(x, -1)
    del x
    n = y.shape[-1]
    assert y.dtype == torch.int64
    assert (y[..., -1] == n).all() and (y[..., 0] == 1).all()
    assert bool((y[..., 1:] - y[..., :-1] == 1).all())
