"""Property-based tests (hypothesis): every scan and affine-scan path against the float64 oracle
in torch_parprims/reference.py, on inputs that hypothesis draws and shrinks.

What is drawn, per example (the falsifying example prints as one case dataclass):

* shapes of rank 1-4 (and 0-d for ``scan``), the scanned dim (written positive or negative) and
  the memory layout of the data (``helpers.with_layout``: contiguous, transpose, step, expand).
  Tensors stay small (at most ``MAX_NUMEL`` elements), but the scanned length is at times on a
  GPU tile boundary (2047-2049, 4095-4097, ...) and the rows at times number 301-600 when the
  length is short: the CUDA engine picks its kernel by rows and length;
* ops and dtypes: add over floating, complex, int32, int64 and bool; mul over floating types
  (values near 1: no overflow); max and min over floating and integer types (bool included);
  logaddexp over floating types. Floating values are at times NaN, infinite, tied or zero where
  the op's reference covers them (``helpers.draw``); no input is all zeros;
* packed sequences (``segmented_scan``, ``affine_scan``, ``matrix_affine_scan``): lengths from
  hypothesis lists (empty sequences likely, at times one long sequence across a tile boundary)
  or from ``helpers.LENGTH_PATTERNS`` (no sequence at all, all empty, 300 of length one, one
  huge among tiny ones, ...), as int32 or int64 offsets, contiguous or as a view: ``big[::2]``,
  ``big[1::3]`` (a storage offset and a stride) or a contiguous slice at a storage offset;
* flags: exclusive and reverse; for the affine scans log_gates, ``_affine_scan_exclusive`` /
  ``_matrix_affine_scan_exclusive``, an initial state or none (for half inputs, float32 or the
  input dtype) in some layout, gates ``a`` / matrices ``A`` broadcast over some dims of ``b``;
* a torch seed for the values, so that hypothesis replays and shrinks an example exactly.

The error bounds are the other test files': ``helpers.scan_scale`` for the scans, and for the
affine scans the same recurrence over ``|a|, |b|, |h0|`` (``AffineSample.scale``,
``MatrixSample.scale``), times the dtype's tolerance (``helpers.assert_close``).

Runs
----
By default each test draws 60 examples (the whole file takes seconds on a CPU).
The environment variable ``PARPRIMS_HYPOTHESIS_EXAMPLES`` sets the number of examples per test
for a long run, e.g. on a GPU::

    PARPRIMS_TEST_DEVICES=cuda PARPRIMS_HYPOTHESIS_EXAMPLES=2000 pytest tests/test_properties.py

A failure prints the falsifying case and a ``@reproduce_failure`` blob (``print_blob``); no
example database is written (``database=None``), so reruns draw afresh.
"""
import contextlib
import math
import os
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch_parprims as pp
from torch_parprims import reference as ref

from helpers import (
    COMPLEX, FLOATS, HALF, INTS, LENGTH_PATTERNS, LONG_PATTERNS, OPS, VIEWS, assert_close, draw, make_offsets,
    scan_scale, tol, with_layout)
from test_affine_scan import AffineSample, draw_gates, draw_values
from test_matrix_affine_scan import MatrixSample

# ---- settings --------------------------------------------------------------------------------

settings.register_profile(
    "parprims",
    max_examples=int(os.environ.get("PARPRIMS_HYPOTHESIS_EXAMPLES") or 60),
    deadline=None,
    print_blob=True,
    database=None,
    # The autouse seeding fixture of conftest.py runs once per test, not per example: the
    # examples seed torch themselves (see `seeded`).
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
SETTINGS = settings.get_profile("parprims")

# ---- sizes -----------------------------------------------------------------------------------

MAX_NUMEL = 8200  # elements of the data: small, yet room for a row of 4097
TILE_LENGTHS = (31, 32, 33, 255, 256, 257, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097)
MANY_ROWS = (301, 600)  # at times this many rows of a short length
PATTERNS = tuple(p for p in LENGTH_PATTERNS if p not in LONG_PATTERNS)  # at most about 3,200 in all
OFFSETS_VIEWS = ("contiguous", "step", "step_at_offset", "at_offset")

SCAN_DTYPES = {
    "add": FLOATS + COMPLEX + INTS,
    "mul": FLOATS,
    "max": FLOATS + INTS,
    "min": FLOATS + INTS,
    "logaddexp": FLOATS,
}
# helpers.draw's special values that each op's reference comparison covers (real floating only).
SPECIAL_VALUES = {
    "add": ("nan", "inf"),
    "mul": ("zeros", "nan"),
    "max": ("ties", "nan", "inf"),
    "min": ("ties", "nan", "inf"),
    "logaddexp": ("nan", "inf"),
}


# ---- torch randomness and layouts ----------------------------------------------------------------

seeds = st.integers(0, 2**32 - 1)


@contextlib.contextmanager
def seeded(seed: int):
    """Torch's CPU generator seeded for one example (the helpers draw on the CPU, then move)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def not_all_zero(x: torch.Tensor) -> torch.Tensor:
    """``x`` (contiguous, fresh) with a nonzero first element: the first element is in every
    layout of ``with_layout``, the slice that "expand" broadcasts included."""
    if x.numel() and x.reshape(-1)[0] == 0:
        x.view(-1)[0] = 1
    return x


def offsets_view(offsets: torch.Tensor, view: str) -> torch.Tensor:
    """The same offsets in another layout. The entries around them repeat their neighbours, so
    that reading the buffer densely gives wrong but in-range sequences (never a read out of
    bounds): ``step`` is ``big[::2]``, ``step_at_offset`` ``big[1::3]``, ``at_offset`` a
    contiguous slice starting at storage offset 1."""
    if view == "contiguous":
        return offsets
    if view == "step":
        return offsets.repeat_interleave(2)[::2]
    if view == "step_at_offset":
        return offsets.repeat_interleave(3)[1::3]
    if view == "at_offset":
        return torch.cat([offsets[:1], offsets])[1:]
    raise ValueError(view)


# ---- strategies: shapes and packed sequences -----------------------------------------------------


def lengths_along_dim():
    """The size of the scanned dimension: mostly short, at times on a tile boundary."""
    return st.one_of(st.integers(0, 70), st.sampled_from(TILE_LENGTHS))


@st.composite
def other_sizes(draw, count: int, budget: int):
    """``count`` sizes (the dims besides the scanned one) with a product of at most
    ``budget``: 1-5 each, or at times one of 301-600 (many rows)."""
    sizes = draw(st.lists(st.integers(1, 5), min_size=count, max_size=count))
    if count and draw(st.integers(0, 3)) == 0:
        sizes[draw(st.integers(0, count - 1))] = draw(st.integers(*MANY_ROWS))
    while math.prod(sizes) > max(budget, 1):  # halve the largest until it fits
        i = max(range(count), key=sizes.__getitem__)
        sizes[i] = max(1, sizes[i] // 2)
    return sizes


@st.composite
def shape_and_dim(draw, length: int, max_rank: int = 4, max_numel: int = MAX_NUMEL, trailing: int = 0):
    """``(shape, dim)`` of rank 1..``max_rank`` with ``length`` along ``dim``; ``dim`` is written
    positive or negative, counting ``trailing`` extra dims after the shape (a matrix scan's
    state dim)."""
    rank = draw(st.integers(1, max_rank))
    pos = draw(st.integers(0, rank - 1))
    shape = draw(other_sizes(rank - 1, max_numel // max(length, 1)))
    shape.insert(pos, length)
    dim = pos - (rank + trailing) if draw(st.booleans()) else pos
    return tuple(shape), dim


@dataclass(frozen=True)
class Packed:
    """Packed sequences along the scanned dim: their lengths and how the offsets are given."""

    lengths: tuple
    dtype: torch.dtype = torch.int64
    view: str = "contiguous"

    @property
    def total(self) -> int:
        return sum(self.lengths)

    @property
    def count(self) -> int:
        return len(self.lengths)

    def offsets(self, device) -> torch.Tensor:
        return offsets_view(make_offsets(self.lengths, self.dtype, device), self.view)


@st.composite
def packed(draw):
    """Sequence lengths from a hypothesis list (about half of them empty; at times one of a
    tile-boundary length among them) or from a ``helpers.LENGTH_PATTERNS`` pattern, with an
    offsets dtype and layout."""
    if draw(st.integers(0, 3)) == 0:
        name = draw(st.sampled_from(PATTERNS))
        with seeded(draw(seeds)):
            lengths = list(LENGTH_PATTERNS[name]())
    else:
        lengths = draw(st.lists(st.one_of(st.just(0), st.integers(1, 40)), max_size=12))
        if draw(st.integers(0, 3)) == 0:
            lengths.insert(draw(st.integers(0, len(lengths))), draw(st.sampled_from(TILE_LENGTHS)))
    dtype = draw(st.sampled_from((torch.int32, torch.int64)))
    return Packed(tuple(lengths), dtype, draw(st.sampled_from(OFFSETS_VIEWS)))


@st.composite
def maybe_packed(draw, is_packed: bool):
    """``(packed sequences or None, the size of the scanned dim)``."""
    if is_packed:
        p = draw(packed())
        return p, p.total
    return None, draw(lengths_along_dim())


# ---- scans ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScanCase:
    shape: tuple
    dim: int
    op: str
    dtype: torch.dtype
    values: str  # helpers.draw: normal | nan | inf | ties | zeros
    view: str  # helpers.with_layout
    exclusive: bool
    reverse: bool
    packed: Optional[Packed]
    seed: int

    def make(self, device) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        with seeded(self.seed):
            x = not_all_zero(draw(self.shape, self.op, self.dtype, self.values, device))
        offsets = self.packed.offsets(device) if self.packed else None
        return with_layout(x, self.view, self.dim), offsets


@st.composite
def scan_cases(draw, segmented: bool):
    """A scan (``segmented=False``, 0-d tensors included) or segmented scan to run."""
    p, length = draw(maybe_packed(segmented))
    if not segmented and draw(st.integers(0, 15)) == 0:
        shape, dim = (), draw(st.sampled_from((0, -1)))
    else:
        shape, dim = draw(shape_and_dim(length))
    op = draw(st.sampled_from(OPS))
    dtype = draw(st.sampled_from(SCAN_DTYPES[op]))
    values = "normal"
    if dtype.is_floating_point and draw(st.integers(0, 3)) == 0:
        values = draw(st.sampled_from(SPECIAL_VALUES[op]))
    return ScanCase(shape, dim, op, dtype, values, view=draw(st.sampled_from(VIEWS)), exclusive=draw(st.booleans()),
                    reverse=draw(st.booleans()), packed=p, seed=draw(seeds))


def check_scan(case: ScanCase, x, offsets, y):
    expected = ref.segmented_scan(x, offsets, case.dim, case.op, case.exclusive, case.reverse)
    assert y.device == x.device
    assert y.dtype == (torch.int64 if case.op == "add" and case.dtype in INTS else case.dtype)
    floating = case.dtype.is_floating_point or case.dtype.is_complex
    scale = scan_scale(x, offsets, case.dim, case.op, case.exclusive, case.reverse, expected) if floating else None
    assert_close(y, expected, scale=scale)


@SETTINGS
@given(case=scan_cases(segmented=False))
def test_scan_matches_reference(case, device):
    x, _ = case.make(device)
    y = pp.scan(x, case.dim, case.op, exclusive=case.exclusive, reverse=case.reverse)
    check_scan(case, x, None, y)


@SETTINGS
@given(case=scan_cases(segmented=True))
def test_segmented_scan_matches_reference(case, device):
    x, offsets = case.make(device)
    y = pp.segmented_scan(x, offsets, case.dim, case.op, exclusive=case.exclusive, reverse=case.reverse)
    check_scan(case, x, offsets, y)


# ---- affine scans --------------------------------------------------------------------------------


@st.composite
def broadcast_shape(draw, shape: tuple):
    """A shape that broadcasts to ``shape``: some dims 1, at times fewer (leading) dims."""
    kept = [n if draw(st.booleans()) else 1 for n in shape]
    dropped = draw(st.integers(0, len(kept))) if draw(st.integers(0, 3)) == 0 else 0
    return tuple(kept[dropped:])


def state_shape(shape: tuple, dim: int, p: Optional[Packed]) -> tuple:
    """The initial/final state: ``shape`` without ``dim``, with the sequences first if packed."""
    state = tuple(n for i, n in enumerate(shape) if i != dim % len(shape))
    return ((p.count,) if p else ()) + state


def subnormal_floor(scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``scale`` plus what makes the bound at least the spacing of ``dtype``'s subnormals: a
    float32 initial state of 7e-7 is output by an exclusive float16 scan as a subnormal, rounded
    by up to 3e-8 (4%); a bound relative to the value alone would fail it."""
    info = torch.finfo(dtype)
    return scale + info.smallest_normal * info.eps / tol(dtype)


@dataclass(frozen=True)
class AffineCase:
    shape: tuple  # b's
    dim: int
    dtype: torch.dtype
    a_shape: tuple  # broadcast to b
    a_view: str
    view: str  # b's layout
    init: str  # none | state (float32 for half inputs) | input (the input dtype)
    init_view: str
    log_gates: bool
    exclusive: bool  # _affine_scan_exclusive
    reverse: bool
    packed: Optional[Packed]
    seed: int

    @property
    def sample(self) -> AffineSample:  # run, reference and error scale of test_affine_scan.py
        return AffineSample(self.shape, self.dim, dtype=self.dtype, reverse=self.reverse, log_gates=self.log_gates,
                            exclusive=self.exclusive)

    def make(self, device):
        """``(a, b, initial_state, offsets)``"""
        with seeded(self.seed):
            a = draw_gates(self.a_shape, self.dtype, self.log_gates, device)
            b = not_all_zero(draw_values(self.shape, self.dtype, device))
            h0 = None
            if self.init != "none":
                sdtype = torch.float32 if (self.dtype in HALF and self.init == "state") else self.dtype
                h0 = with_layout(draw_values(state_shape(self.shape, self.dim, self.packed), sdtype, device),
                                 self.init_view, 0)
        a = with_layout(a, self.a_view, -1)
        offsets = self.packed.offsets(device) if self.packed else None
        return a, with_layout(b, self.view, self.dim), h0, offsets


@st.composite
def affine_cases(draw):
    """An affine_scan or _affine_scan_exclusive to run, over rows or packed sequences."""
    p, length = draw(maybe_packed(draw(st.booleans())))
    shape, dim = draw(shape_and_dim(length))
    dtype = draw(st.sampled_from(FLOATS + COMPLEX))
    return AffineCase(
        shape, dim, dtype,
        a_shape=draw(broadcast_shape(shape)),
        a_view=draw(st.sampled_from(VIEWS)),
        view=draw(st.sampled_from(VIEWS)),
        init=draw(st.sampled_from(("none", "state", "input") if dtype in HALF else ("none", "state"))),
        init_view=draw(st.sampled_from(("contiguous", "transpose", "step"))),
        log_gates=draw(st.booleans()),
        exclusive=draw(st.booleans()),
        reverse=draw(st.booleans()),
        packed=p,
        seed=draw(seeds),
    )


@SETTINGS
@given(case=affine_cases())
def test_affine_scan_matches_reference(case, device):
    """affine_scan and _affine_scan_exclusive: h and the final states."""
    s = case.sample
    a, b, h0, offsets = case.make(device)
    h, final = s.run(a, b, h0, offsets)
    rh, rf = s.reference(a, b, h0, offsets)
    sh, sf = s.scale(a, b, h0, offsets)
    assert h.dtype == b.dtype and h.shape == b.shape and h.device == b.device
    assert final.dtype == (torch.float32 if case.dtype in HALF else case.dtype)
    assert_close(h, rh, scale=subnormal_floor(sh, h.dtype), what="h")
    assert_close(final, rf, scale=subnormal_floor(sf, final.dtype), what="final_state")


@dataclass(frozen=True)
class MatrixCase:
    lead: tuple  # b is (*lead, d)
    d: int
    dim: int  # of b's dims, not its last
    dtype: torch.dtype
    A_lead: tuple  # A is (*A_lead, d, d), broadcast to lead
    view: str  # b's layout
    init: bool
    exclusive: bool  # _matrix_affine_scan_exclusive
    reverse: bool
    packed: Optional[Packed]
    seed: int

    @property
    def sample(self) -> MatrixSample:  # run, reference and error scale of test_matrix_affine_scan.py
        return MatrixSample(self.lead, self.d, self.dim, dtype=self.dtype, reverse=self.reverse,
                            exclusive=self.exclusive)

    def make(self, device):
        """``(A, b, initial_state, offsets)``. Every A (and |A|) is a contraction in the max norm
        (its rows' sums of |A_ij| at most 0.95): A may be one matrix for every step (broadcast
        along time), so contractive on average would not do."""
        op_dim = self.sample.op_dim
        with seeded(self.seed):
            A = (0.4 / math.sqrt(self.d)) * torch.randn(*self.A_lead, self.d, self.d, dtype=torch.float64)
            A = A * (0.95 / A.abs().sum(-1).amax(-1).clamp(min=0.95))[..., None, None]
            b = not_all_zero(torch.randn(*self.lead, self.d, dtype=torch.float64).to(self.dtype))
            h0 = None
            if self.init:
                h0 = torch.randn(state_shape(self.lead, op_dim, self.packed) + (self.d,), dtype=torch.float64)
        A = A.to(self.dtype).to(device)
        h0 = None if h0 is None else h0.to(self.dtype).to(device)
        offsets = self.packed.offsets(device) if self.packed else None
        return A, with_layout(b.to(device), self.view, op_dim), h0, offsets


@st.composite
def matrix_cases(draw):
    """A matrix_affine_scan or _matrix_affine_scan_exclusive to run (states of size 1-8)."""
    p, length = draw(maybe_packed(draw(st.booleans())))
    d = draw(st.integers(1, min(8, MAX_NUMEL // max(length, 1))))
    lead, dim = draw(shape_and_dim(length, max_rank=3, max_numel=MAX_NUMEL // d, trailing=1))
    return MatrixCase(
        lead, d, dim,
        dtype=draw(st.sampled_from((torch.float32, torch.float64))),
        A_lead=draw(broadcast_shape(lead)),
        view=draw(st.sampled_from(VIEWS)),
        init=draw(st.booleans()),
        exclusive=draw(st.booleans()),
        reverse=draw(st.booleans()),
        packed=p,
        seed=draw(seeds),
    )


@SETTINGS
@given(case=matrix_cases())
def test_matrix_affine_scan_matches_reference(case, device):
    """matrix_affine_scan and _matrix_affine_scan_exclusive: h and the final states."""
    s = case.sample
    A, b, h0, offsets = case.make(device)
    h, final = s.run(A, b, h0, offsets)
    rh, rf = s.reference(A, b, h0, offsets)
    sh, sf = s.scale(A, b, h0, offsets)
    assert h.dtype == b.dtype and final.dtype == b.dtype and h.shape == b.shape
    assert_close(h, rh, scale=sh, what="h")
    assert_close(final, rf, scale=sf, what="final_state")
