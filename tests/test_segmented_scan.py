"""segmented_scan and _scan_with_indices over packed sequences, from one sample table."""
import itertools
from dataclasses import dataclass

import pytest
import torch

import torch_parprims as pp
from torch_parprims import reference as ref

from helpers import (
    BIG_PATTERNS, FLOATS, INTS, LENGTH_PATTERNS, LONG_PATTERNS, NONDET_TOL, OPCHECK_UTILS, OPS, assert_close,
    assert_same_as_eager, draw, finite_mask_fn, grad_leaf, grad_samples, grad_weights, make_offsets, sample_params,
    scan_scale, with_layout)

# Where the packed dimension sits: (shape given the total length T, dim).
LAYOUTS = {
    "T": (lambda T: (T,), 0),
    "TC": (lambda T: (T, 3), 0),
    "BT": (lambda T: (2, T), 1),
    "BTC": (lambda T: (2, T, 3), 1),
    "BTC-neg": (lambda T: (2, T, 3), -2),
    # 40 channels: on CUDA, the column kernel's blocks of 16 or 32 channels, the last partial.
    "TW": (lambda T: (T, 40), 0),
    # 300 rows: on CUDA, enough rows for the row loop to give each block whole rows.
    "RT": (lambda T: (300, T), 1),
}
ROTATION = ("T", "TC", "BT", "BTC", "BTC-neg")  # the layouts the pattern samples take in turn


@dataclass(frozen=True)
class SegSample:
    lengths: str  # a key of helpers.LENGTH_PATTERNS, drawn afresh per test
    layout: str = "T"
    op: str = "add"
    dtype: torch.dtype = torch.float32
    exclusive: bool = False
    reverse: bool = False
    view: str = "contiguous"
    offsets_dtype: torch.dtype = torch.int64
    values: str = "normal"
    slow: bool = False
    check: bool = False
    compile: bool = False

    def __str__(self):
        flags = "".join(c for c, on in (("E", self.exclusive), ("R", self.reverse)) if on) or "I"
        dt = lambda t: str(t).replace("torch.", "")
        return (f"{self.op}-{self.lengths}-{self.layout}-{dt(self.dtype)}-{flags}-{self.view}-"
                f"{dt(self.offsets_dtype)}-{self.values}")

    @property
    def dim(self):
        return LAYOUTS[self.layout][1]

    def make(self, device):
        lengths = LENGTH_PATTERNS[self.lengths]()
        offsets = make_offsets(lengths, self.offsets_dtype, device)
        shape = LAYOUTS[self.layout][0](sum(lengths))
        x = with_layout(draw(shape, self.op, self.dtype, self.values, device), self.view, self.dim)
        return x, offsets

    @property
    def differentiable(self):
        return self.dtype.is_floating_point or self.dtype.is_complex

    @property
    def small(self):
        return self.lengths not in BIG_PATTERNS


def _samples():
    S = SegSample
    out = []
    for op, (ex, rv) in itertools.product(OPS, itertools.product((False, True), repeat=2)):
        out.append(S("random", "BTC", op, exclusive=ex, reverse=rv, check=(ex, rv) in ((False, False), (True, True))))
    for i, pattern in enumerate(LENGTH_PATTERNS):
        for j, op in enumerate(("add", "max", "logaddexp", "mul")):
            long = pattern in LONG_PATTERNS
            out.append(S(pattern, "T" if long else ROTATION[(i + j) % len(ROTATION)], op,
                         exclusive=(i + j) % 2 == 0, reverse=(i + j) % 3 == 0,
                         offsets_dtype=torch.int32 if i % 2 else torch.int64,
                         slow=pattern == "gpu_multi_tile" or (long and op in ("logaddexp", "mul"))))
    for pattern, (ex, rv) in itertools.product(("chunk_crossing", "gpu_multi_tile"), itertools.product((False, True), repeat=2)):
        out.append(S(pattern, "T", "min", torch.float64, exclusive=ex, reverse=rv, slow=True))
    for layout, view in itertools.product(("TC", "BT", "BTC", "BTC-neg"), ("transpose", "step", "expand")):
        out.append(S("random", layout, "add" if view != "step" else "max", view=view, reverse=layout == "BT",
                     check=(layout, view) == ("BTC", "transpose")))
    for dtype, op in itertools.product(FLOATS, OPS):
        out.append(S("random", "TC", op, dtype, exclusive=op == "min", reverse=op == "add"))
    for dtype, op in itertools.product(INTS, ("add", "max", "min")):
        out.append(S("random", "BT", op, dtype, exclusive=op != "add", reverse=dtype == torch.bool,
                     check=dtype == torch.int64 and op == "max"))
    out.append(S("random", "BTC", "add", torch.complex64, exclusive=True, reverse=True))
    # Thousands of positions along a strided dim: the CUDA column kernel cuts rows into spans
    # (a summary pass, then the full pass), with sequences crossing the spans' boundaries.
    for op, (ex, rv) in zip(("add", "max", "logaddexp", "add"), itertools.product((False, True), repeat=2)):
        out.append(S("huge_and_tiny", "TW", op, exclusive=ex, reverse=rv, offsets_dtype=torch.int32 if rv else torch.int64))
    # The CUDA row loop over packed sequences: hundreds of packed rows (a block per row), and one
    # long row cut into spans, in each kind of value, with bounds on the tiles' edges and tiles
    # holding more sequences than a block has threads.
    for op, dtype, (ex, rv) in (("add", torch.float32, (False, False)), ("max", torch.bfloat16, (True, False)),
                                ("logaddexp", torch.float32, (False, True)), ("add", torch.int64, (True, True)),
                                ("mul", torch.float64, (False, False)), ("min", torch.int32, (False, True))):
        out.append(S("rows_1100", "RT", op, dtype, exclusive=ex, reverse=rv, check=op == "max"))
    for dtype, (ex, rv) in zip((torch.bfloat16, torch.float64, torch.int32, torch.complex64),
                               itertools.product((False, True), repeat=2)):
        out.append(S("tile_edges", "T", "add", dtype, exclusive=ex, reverse=rv))
    out.append(S("many_tiny", "T", "max", torch.bfloat16, reverse=True))
    out.append(S("many_tiny", "T", "add", torch.float16, exclusive=True))
    out.append(S("leading_trailing_empty", "TC", "add", torch.complex128, view="transpose"))
    for op in ("max", "min", "add", "logaddexp"):
        out.append(S("random", "BT", op, values="nan", exclusive=op == "min", reverse=op == "max"))
    out.append(S("random", "BT", "mul", torch.float64, values="zeros", exclusive=True))
    out.append(S("random", "BT", "max", values="ties", reverse=True))
    out.append(S("random", "BT", "mul", torch.float64, compile=True))
    out.append(S("leading_trailing_empty", "BTC", "max", reverse=True, compile=True))
    return out


SAMPLES = _samples()
GRAD_SAMPLES = grad_samples(SAMPLES, lambda s: s.differentiable and s.small and s.values not in ("nan", "inf", "ties"))


def _run(s, x, offsets):
    return pp.segmented_scan(x, offsets, s.dim, s.op, s.exclusive, s.reverse)


@pytest.mark.parametrize("s", sample_params(SAMPLES))
def test_segmented_scan_matches_reference(s, device):
    x, offsets = s.make(device)
    y = _run(s, x, offsets)
    expected = ref.segmented_scan(x, offsets, s.dim, s.op, s.exclusive, s.reverse)
    scale = scan_scale(x, offsets, s.dim, s.op, s.exclusive, s.reverse, expected) if s.differentiable else None
    assert_close(y, expected, scale=scale)


@pytest.mark.parametrize("s", sample_params(SAMPLES))
def test_segmented_scan_equals_per_sequence_scans(s, device):
    """The varlen oracle: the packed result is the per-sequence results concatenated."""
    x, offsets = s.make(device)
    y = _run(s, x, offsets)
    bounds = offsets.tolist()
    if len(bounds) > 60:  # many tiny sequences: check the longest and a spread of the rest
        keep = sorted(range(len(bounds) - 1), key=lambda k: bounds[k] - bounds[k + 1])[:5]
        keep = sorted(set(keep) | set(range(0, len(bounds) - 1, len(bounds) // 40)))
    else:
        keep = range(len(bounds) - 1)
    for k in keep:
        part = x.narrow(s.dim, bounds[k], bounds[k + 1] - bounds[k])
        expected = pp.scan(part, s.dim, s.op, s.exclusive, s.reverse)
        got = y.narrow(s.dim, bounds[k], bounds[k + 1] - bounds[k])
        scale = (scan_scale(part, None, s.dim, s.op, s.exclusive, s.reverse, ref.scan(part, s.dim, s.op, s.exclusive, s.reverse))
                 if s.differentiable else None)
        assert_close(got, expected, scale=scale, what=f"sequence {k}")


@pytest.mark.parametrize("op", OPS)
def test_one_sequence_equals_scan_and_offsets_dtypes_agree(op, device):
    x = draw((5, 300), op, torch.float32, device=device)
    whole = make_offsets([300], device=device)
    # (Equal up to rounding, not bitwise: on CUDA, rows of 300 take one-warp blocks in `scan`
    # and the flat kernel with packed sequences, which add in different orders.)
    y = pp.scan(x, 1, op, True, True)
    assert_close(pp.segmented_scan(x, whole, 1, op, True, True), y,
                 scale=scan_scale(x, whole, 1, op, True, True, y))
    lengths = [0, 17, 0, 120, 1, 162, 0]
    y64 = pp.segmented_scan(x, make_offsets(lengths, torch.int64, device), 1, op)
    y32 = pp.segmented_scan(x, make_offsets(lengths, torch.int32, device), 1, op)
    assert_close(y32, y64, scale=0)


@pytest.mark.parametrize("s", sample_params(GRAD_SAMPLES))
def test_segmented_scan_gradcheck(s, device):
    x, offsets = s.make(device)
    x, to_input = grad_leaf(x)
    fn = lambda t: _run(s, to_input(t), offsets)
    if s.exclusive and s.op in ("max", "min", "logaddexp"):
        fn = finite_mask_fn(fn, x)
    assert torch.autograd.gradcheck(fn, (x,), fast_mode=x.numel() > 300, nondet_tol=NONDET_TOL)


# opcheck compares eager and traced outputs without equal_nan: samples with NaN/inf inputs are left out.
@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if not s.slow and s.small and s.values not in ("nan", "inf")], "check"))
def test_segmented_scan_opcheck(s, device):
    x, offsets = s.make(device)
    if s.differentiable:
        x.requires_grad_()
    torch.library.opcheck(torch.ops.parprims.segmented_scan.default,
                          (x, offsets, s.dim, s.op, s.exclusive, s.reverse), test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if s.differentiable and not s.slow and s.small], "compile"))
def test_segmented_scan_compile(s, device):
    torch._dynamo.reset()
    fn = torch.compile(lambda x, o: _run(s, x, o), fullgraph=True, dynamic=True)
    for _ in range(2):  # fresh lengths the second time: dynamic shapes, no recompile
        x, offsets = s.make(device)
        x.requires_grad_()
        y = fn(x, offsets)
        w = grad_weights(y)
        (g,) = torch.autograd.grad(y, x, w)
        y_eager = _run(s, x, offsets)
        (g_eager,) = torch.autograd.grad(y_eager, x, w)
        assert_same_as_eager((y,), (y_eager,), (g,), (g_eager,))


# ---- _scan_with_indices -----------------------------------------------------------------------

INDEX_CASES = [
    # (lengths pattern or None, layout, values, dtype)
    (None, "BT", "normal", torch.float32),
    (None, "BTC", "ties", torch.float64),
    (None, "BT", "nan", torch.float32),
    (None, "TC", "inf", torch.float16),
    ("random", "BTC", "ties", torch.float32),
    ("leading_trailing_empty", "T", "nan", torch.float64),
    ("huge_and_tiny", "T", "ties", torch.bfloat16),
    ("chunk_crossing", "T", "ties", torch.float32),
]


@pytest.mark.parametrize("op", ("max", "min"))
@pytest.mark.parametrize("exclusive,reverse", list(itertools.product((False, True), repeat=2)))
@pytest.mark.parametrize("case", INDEX_CASES, ids=lambda c: "-".join(map(str, c)).replace("torch.", ""))
def test_scan_with_indices_matches_reference(case, op, exclusive, reverse, device):
    pattern, layout, values, dtype = case
    shape_fn, dim = LAYOUTS[layout]
    lengths = LENGTH_PATTERNS[pattern]() if pattern else [45]
    offsets = make_offsets(lengths, device=device) if pattern else None
    x = draw(shape_fn(sum(lengths)), op, dtype, values, device)
    v, i = torch.ops.parprims._scan_with_indices(x, offsets, dim, op, exclusive, reverse)
    rv, ri = ref.scan_with_indices(x, offsets, dim, op, exclusive, reverse)
    assert i.dtype == torch.int64 and v.dtype == dtype
    assert_close(v, rv, scale=0, what="values")
    assert_close(i, ri, what="indices")
    # The indices point at the values they report.
    taken = i >= 0
    assert_close(torch.where(taken, x.gather(dim, i.clamp(min=0)), v), v, scale=0, what="gathered values")


def test_scan_with_indices_opcheck(device):
    x = draw((3, 40), "max", torch.float64, "ties", device)  # a backward helper: no autograd of its own
    offsets = make_offsets([10, 0, 30], device=device)
    for args in ((x, offsets, 1, "max", True, False), (x, None, 1, "min", False, True)):
        torch.library.opcheck(torch.ops.parprims._scan_with_indices.default, args, test_utils=OPCHECK_UTILS)
