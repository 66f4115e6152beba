"""segment_reduce: comparison with the float64 references and with torch.segment_reduce,
edge cases (empty sequences, empty input, NaN and infinities, ties, zeros), gradients
(gradcheck, first-of-ties, prod with zeros), opcheck, torch.compile, and CUDA graph capture of
the reduction family (segment_reduce, reduce, histogram). `reduce` over a dimension with a mask:
test_masked_reduce.py."""
from dataclasses import dataclass

import pytest
import torch

import torch_parprims as pp
from torch_parprims import reference as ref

from helpers import (LENGTH_PATTERNS, OPCHECK_UTILS, assert_close, capture_cuda_graph, draw, make_offsets,
                     sample_params, tol, with_layout)
from reduce_common import DRAW_OP, FINITE, INT_OPS, OPS, reduction_scale

_ops = torch.ops.parprims


# ---- segment_reduce -------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentSample:
    pattern: str = "random"  # a helpers.LENGTH_PATTERNS entry
    features: tuple = ()  # the other dims; the packed dim goes at `dim`
    dim: int = 0
    op: str = "sum"
    dtype: torch.dtype = torch.float32
    values: str = "normal"  # normal | nan | inf | ties | zeros
    view: str = "contiguous"  # helpers.with_layout
    offsets_dtype: torch.dtype = torch.int64
    offsets_view: str = "contiguous"  # contiguous | strided
    slow: bool = False
    check: bool = False
    compile: bool = False

    def __str__(self):
        feats = "x".join(map(str, self.features)) or "flat"
        dtype = str(self.dtype).replace("torch.", "")
        odt = str(self.offsets_dtype).replace("torch.", "")
        return (f"{self.pattern}-{feats}-dim{self.dim}-{self.op}-{dtype}-{self.values}-{self.view}-{odt}"
                f"-{self.offsets_view}")

    def make(self, device):
        lengths = LENGTH_PATTERNS[self.pattern]()
        total = sum(lengths)
        shape = self.features[:self.dim] + (total,) + self.features[self.dim:]
        x = with_layout(draw(shape, DRAW_OP[self.op], self.dtype, self.values, device), self.view, self.dim)
        offsets = make_offsets(lengths, self.offsets_dtype, device)
        if self.offsets_view == "strided":
            buffer = torch.full((2 * offsets.numel(),), -7, dtype=offsets.dtype, device=device)
            buffer[::2] = offsets
            offsets = buffer[::2]
        return x, offsets, lengths


def _segment_samples():
    S = SegmentSample
    out = []
    for op in OPS:
        out.append(S(op=op, check=op in ("max", "prod", "logsumexp"), compile=op in ("sum", "max")))
        out.append(S(op=op, features=(3, 5), dtype=torch.float64))
        out.append(S(op=op, pattern="huge_and_tiny"))
        for values in ("nan", "inf", "ties", "zeros"):
            out.append(S(op=op, values=values, features=(4,)))
        for dtype in (torch.float16, torch.bfloat16):
            out.append(S(op=op, dtype=dtype, features=(3,)))
        # 100 features side by side: on the CPU, twelve groups of 8 rows, then 4 rows alone.
        out.append(S(op=op, features=(100,), dtype=torch.bfloat16 if op == "mean" else torch.float32))
    for op in INT_OPS:
        for dtype in (torch.int32, torch.int64, torch.bool):
            out.append(S(op=op, dtype=dtype, features=(2,)))
    for pattern in LENGTH_PATTERNS:
        if pattern == "random":
            continue  # the op loop above has it
        big = pattern in ("chunk_crossing", "gpu_multi_tile")
        out.append(S(pattern=pattern, op="sum", slow=big))
        out.append(S(pattern=pattern, op="max", features=(3,), slow=big))
    # Other dims and layouts: the packed dim in the middle or last, strided views.
    out.append(S(features=(2, 3), dim=1, op="mean", view="transpose", check=True))
    out.append(S(features=(4,), dim=1, op="logsumexp", view="step"))
    out.append(S(features=(4, 6), dim=0, op="min", view="expand"))
    out.append(S(features=(33,), dim=0, op="sum", view="transpose"))  # rows adjacent: the column kernel on CUDA
    out.append(S(features=(33,), dim=0, op="sum", offsets_dtype=torch.int32, offsets_view="strided", check=True))
    out.append(S(op="prod", offsets_dtype=torch.int32, offsets_view="strided"))
    out.append(S(pattern="huge_and_tiny", features=(16,), op="sum"))
    out.append(S(pattern="gpu_multi_tile", features=(2,), op="logsumexp", slow=True))
    return list(dict.fromkeys(out))  # each sample once


SEGMENT_SAMPLES = _segment_samples()


def _expected_segment(x, offsets, op, dim):
    expected = ref.segment_reduce(x.cpu(), offsets.cpu(), op, dim)
    if not (x.dtype.is_floating_point):
        return expected, None
    counts_shape = [1] * x.dim()
    counts_shape[dim] = -1
    counts = ref.lengths_from_offsets(offsets.cpu()).view(counts_shape) if offsets.numel() > 1 else torch.zeros(0)
    if op in ("sum", "mean"):
        absx = x.detach().cpu().double().abs()
        absx = torch.where(absx.isfinite(), absx, 0)
        scale = ref.segment_reduce(absx, offsets.cpu(), op, dim)
    else:
        scale = reduction_scale(None, expected, op, counts)
    return expected, scale


@pytest.mark.parametrize("s", sample_params(SEGMENT_SAMPLES))
def test_segment_reduce_matches_reference(s, device):
    x, offsets, _ = s.make(device)
    got = pp.segment_reduce(x, offsets, s.op, s.dim)
    assert got.device == x.device
    expected, scale = _expected_segment(x, offsets, s.op, s.dim)
    assert got.dtype == (torch.int64 if s.op in ("sum", "prod") and not s.dtype.is_floating_point else s.dtype)
    assert_close(got, expected, scale=scale)


@pytest.mark.parametrize("op", ("sum", "mean", "max", "min", "prod"))
@pytest.mark.parametrize("pattern", ("random", "huge_and_tiny", "all_length_one"))
def test_segment_reduce_matches_torch(op, pattern, device):
    """torch.segment_reduce on non-empty sequences (its empty-sequence values differ: NaN for mean)."""
    lengths = [n for n in LENGTH_PATTERNS[pattern]() if n > 0]
    x = torch.randn(sum(lengths), 3, dtype=torch.float64, device=device)
    offsets = make_offsets(lengths, device=device)
    want = torch.segment_reduce(x, op, offsets=offsets, axis=0)
    torch.testing.assert_close(pp.segment_reduce(x, offsets, op), want, rtol=1e-12, atol=1e-12)


def test_segment_reduce_empty(device):
    """No elements: every sequence gets the identity; no sequences: an empty output."""
    x = torch.randn(0, 3, device=device)
    offsets = torch.tensor([0, 0, 0], device=device)
    ident = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "max": float("-inf"), "min": float("inf"),
             "logsumexp": float("-inf")}
    for op, value in ident.items():
        got = pp.segment_reduce(x, offsets, op)
        assert got.shape == (2, 3) and torch.equal(got.cpu(), torch.full((2, 3), value))
        none = pp.segment_reduce(x, torch.zeros(1, dtype=torch.int32, device=device), op)
        assert none.shape == (0, 3)
    ints = pp.segment_reduce(torch.zeros(0, dtype=torch.int32, device=device), offsets, "max")
    assert ints.tolist() == [torch.iinfo(torch.int32).min] * 2 and ints.dtype == torch.int32


@pytest.mark.parametrize("features", ((), (16,)))
@pytest.mark.parametrize("op", ("sum", "max", "mean", "logsumexp"))
def test_segment_reduce_sequences_across_pieces(op, features, device):
    """Sequences that cross the pieces a pass cuts the input into (one spanning far more than 32
    of them, short ones between) are combined from the pieces' partials, in a fixed order: the
    result equals the reference and is the same bits on a second call."""
    lengths = [300_000, 1, 0, 2, 70_000, 5, 4_099, 0]
    offsets = make_offsets(lengths, device=device)
    x = torch.randn(sum(lengths), *features, dtype=torch.float64, device=device)
    got = pp.segment_reduce(x, offsets, op)
    assert_close(got, ref.segment_reduce(x.cpu(), offsets.cpu(), op),
                 scale=ref.segment_reduce(x.cpu().abs(), offsets.cpu(), op) if op in ("sum", "mean") else None)
    assert torch.equal(got, pp.segment_reduce(x, offsets, op))
    x32 = x.float()
    assert torch.equal(pp.segment_reduce(x32, offsets, op), pp.segment_reduce(x32, offsets, op))


@pytest.mark.parametrize("op", ("sum", "max", "mean", "logsumexp"))
def test_segment_reduce_pieces_of_several_tiles(op, device):
    """An input of about 2^24 elements, thousands of tiles of the CUDA rows pass: sequences
    over several tiles (combined by the fix-up), sequences whose lengths are multiples of 512
    (the earlier warp tile's length; test_segment_reduce_tile_edges has the current tiles'),
    one-element and empty sequences among long ones. Equal to the reference, and the same bits
    on a second call."""
    g = torch.Generator().manual_seed(11)
    lengths = torch.randint(0, 9000, (1800,), generator=g)
    lengths[torch.rand(1800, generator=g) < 0.1] = 0
    lengths[torch.rand(1800, generator=g) < 0.1] = 1
    edges = torch.rand(1800, generator=g) < 0.2
    lengths[edges] = 512 * torch.randint(1, 8, (int(edges.sum()),), generator=g)
    offsets = make_offsets(lengths.tolist(), device=device)
    x = torch.randn(int(lengths.sum()), generator=g).to(device)
    got = pp.segment_reduce(x, offsets, op)
    want = ref.segment_reduce(x.cpu(), offsets.cpu(), op)
    assert_close(got, want, scale=ref.segment_reduce(x.cpu().abs(), offsets.cpu(), op) if op in ("sum", "mean") else None)
    assert torch.equal(got, pp.segment_reduce(x, offsets, op))


def _tile_edge_offsets(n, g):
    """Offsets over ``n`` positions whose sequences start and end on the edges of the CUDA rows
    pass's tiles (256 x kItems positions: 4096 for a 4-byte accumulator, 2048 for an 8-byte one,
    1024 for mean's (sum, count); 32 x kItems for short rows: 512, 256, 128) and one position
    off them, with empty sequences on edges, a stretch of lengths 1-8 across tile edges (tiles
    holding hundreds of starts), and a last long sequence across several tiles."""
    cuts = [0, 0]  # a leading empty sequence
    for tile in (4096, 2048, 1024, 512, 256, 128):
        for j in range(1, 4):
            for edge in (j * tile - 1, j * tile, j * tile, j * tile + 1):  # twice on the edge: an empty one
                if edge < n:
                    cuts.append(edge)
    pos = max(0, n // 2 - 750)
    while pos < min(n - 1, n // 2 + 750):
        pos += int(torch.randint(1, 9, (1,), generator=g))
        cuts.append(min(pos, n))
    cuts += [n - 1, n, n]  # a length-one sequence at the end, then an empty one
    return sorted(cuts)


def _check_rows_in_layout(op, dtype, layout, n, offsets, device):
    """segment_reduce along the last dim of rows of ``n`` positions in ``layout``: one row
    (``flat``), three rows (``rows``: the packed dim last; with an odd ``n`` the rows after the
    first are not 16-byte aligned), every other element (``step``) or a view one element into its
    buffer (``unaligned``). Equal to the reference, and the same bits on a second call."""
    rows = 3 if layout == "rows" else 1
    x = draw((rows, n), DRAW_OP[op], dtype, "normal", device)
    if layout == "step":
        x = with_layout(x, "step", 1)
    elif layout == "unaligned":
        x = torch.cat([x[:, :1], x], 1)[:, 1:]
    if rows == 1:
        x = x[0]
    dim = x.dim() - 1
    got = pp.segment_reduce(x, offsets, op, dim)
    expected, scale = _expected_segment(x, offsets, op, dim)
    assert_close(got, expected, scale=scale)
    assert torch.equal(got, pp.segment_reduce(x, offsets, op, dim))


@pytest.mark.parametrize("size", ("long", "short"))
@pytest.mark.parametrize("layout", ("flat", "rows", "step", "unaligned"))
@pytest.mark.parametrize("op, dtype", (("sum", torch.float32), ("max", torch.float32), ("logsumexp", torch.float32),
                                       ("mean", torch.float32), ("sum", torch.float64), ("prod", torch.float64),
                                       ("sum", torch.int32), ("min", torch.bfloat16)))
def test_segment_reduce_tile_edges(op, dtype, layout, size, device):
    """Sequences on and next to the CUDA rows pass's tile edges (_tile_edge_offsets), on a row
    length that is no multiple of any tile: long rows (block tiles, several of them, the last
    partial) and short ones (under 2048 positions: warp tiles, or one partial block tile for
    wide accumulators); one row, three rows (``rows``: the packed dim last, an odd row length, so
    rows after the first are not 16-byte aligned), every other element (``step``) and a view one
    element into its buffer (``unaligned``): element loads instead of 16-byte ones. Equal to the
    reference, and the same bits on a second call."""
    g = torch.Generator().manual_seed(17)
    n = 6 * 4096 + 101 if size == "long" else 1901
    offsets = torch.tensor(_tile_edge_offsets(n, g), device=device)
    _check_rows_in_layout(op, dtype, layout, n, offsets, device)


def _piece_edge_lengths():
    """Sequence lengths around the pieces of the CUDA stream pass (at these sizes 4096 positions,
    and any piece is a multiple of 2048; a warp streams a piece in rounds of 256 or 512
    positions): one exactly two pieces long, one a position longer starting on a piece edge, a
    long one starting inside a piece over several edges, a second long one starting where it
    ends inside a piece (a head and a tail in one piece), an empty one, a short one ending on an
    edge, one of exactly six pieces on edges, and a short last one."""
    return [8192, 8193, 15, 20000, 8193, 0, 4559, 3 * 8192, 101]


@pytest.mark.parametrize("layout", ("flat", "rows", "step", "unaligned"))
@pytest.mark.parametrize("op, dtype", (("sum", torch.float32), ("max", torch.float32), ("mean", torch.float32),
                                       ("logsumexp", torch.float32), ("sum", torch.bfloat16), ("prod", torch.float64),
                                       ("min", torch.int64)))
def test_segment_reduce_piece_edges(op, dtype, layout, device):
    """Long sequences on average (the CUDA stream pass: a warp a piece, the sequences that cross
    pieces combined by the fix-up) with sequences on and next to the piece edges
    (_piece_edge_lengths): one row, three rows (rows after the first not 16-byte aligned: a
    prologue before each piece's aligned words), every other element (element loads) and a view
    one element into its buffer. Equal to the reference, and the same bits on a second call."""
    lengths = _piece_edge_lengths()
    n = sum(lengths)
    offsets = make_offsets(lengths, device=device)
    _check_rows_in_layout(op, dtype, layout, n, offsets, device)


@pytest.mark.parametrize("layout", ("flat", "step"))
@pytest.mark.parametrize("op, dtype", (("sum", torch.float32), ("max", torch.float32), ("mean", torch.float32),
                                       ("logsumexp", torch.float32), ("sum", torch.bfloat16)))
def test_segment_reduce_many_ends_in_a_piece(op, dtype, layout, device):
    """Long sequences on average (the CUDA stream pass) with a stretch of 200 sequences of 0-8
    positions inside one piece, and 100 of up to 300 after it: a warp finds the ends of 32
    sequences at a time, so a piece holding more ends reads the next 32 in mid-stream, and a
    round (256-512 positions) holds many ends. Equal to the reference, and the same bits on a
    second call."""
    g = torch.Generator().manual_seed(23)
    lengths = ([20000] + torch.randint(0, 9, (200,), generator=g).tolist() + [30000]
               + torch.randint(0, 301, (100,), generator=g).tolist() + [5000])
    offsets = make_offsets(lengths, device=device)
    _check_rows_in_layout(op, dtype, layout, sum(lengths), offsets, device)


@pytest.mark.parametrize("layout", ("contiguous", "view_aligned", "view_unaligned", "odd_features", "wide", "batch"))
@pytest.mark.parametrize("op, dtype", (("sum", torch.float32), ("max", torch.float32), ("mean", torch.bfloat16),
                                       ("logsumexp", torch.float32), ("min", torch.float16), ("sum", torch.int32)))
def test_segment_reduce_features(op, dtype, layout, device):
    """Packed (T, F) features reduced along T: 64 features; a view of 64 features at column 4 of
    68 and at column 1 of 65 (aligned and unaligned for wide loads); 6 features; 100 features
    (groups of 8 side by side and 4 left over); and (2, T, 64) along dim 1. About 11000
    positions in sequences of 0-40 positions and a few thousand long ones, so that the pieces of
    the CPU (2048 positions where features lie side by side) and the CUDA columns pass hold
    sequence ends and some sequences cross many. Equal to the reference, and the same bits on a
    second call."""
    g = torch.Generator().manual_seed(29)
    lengths = torch.randint(0, 41, (300,), generator=g).tolist() + [3000, 7] + [0, 2500]
    offsets = make_offsets(lengths, device=device)
    n = sum(lengths)
    features = {"odd_features": 6, "view_aligned": 68, "view_unaligned": 65, "wide": 100}.get(layout, 64)
    shape = (2, n, features) if layout == "batch" else (n, features)
    x = draw(shape, DRAW_OP[op], dtype, "normal", device)
    if layout.startswith("view"):
        x = x[:, features - 64:]
    dim = 1 if layout == "batch" else 0
    got = pp.segment_reduce(x, offsets, op, dim)
    expected, scale = _expected_segment(x, offsets, op, dim)
    assert_close(got, expected, scale=scale)
    assert torch.equal(got, pp.segment_reduce(x, offsets, op, dim))


@pytest.mark.parametrize("features", (64, 8))
@pytest.mark.parametrize("op, dtype", (("sum", torch.float32), ("max", torch.float32), ("mean", torch.float32),
                                       ("sum", torch.bfloat16), ("prod", torch.float64)))
def test_segment_reduce_features_on_piece_edges(op, dtype, features, device):
    """Packed (T, F) features whose sequences start and end on and next to the edges of the CUDA
    columns pass's pieces (16 positions at this size): runs of exactly one and two pieces, one
    position either side, empty sequences on an edge, one sequence over 40 pieces (folded by a
    warp in the fix-up) and one over exactly 33 and 32, sequences of 1-3 positions (several
    ends in one batch of positions), and a last piece cut short. Equal to the reference, and the
    same bits on a second call."""
    lengths = ([16, 16, 0, 15, 1, 16, 17, 31, 33, 0, 0, 32, 640, 1, 2, 3, 1, 1, 2, 528, 512, 15]
               + [3, 1, 2] * 7 + [16 * 5 + 7])
    offsets = make_offsets(lengths, device=device)
    x = draw((sum(lengths), features), DRAW_OP[op], dtype, "normal", device)
    got = pp.segment_reduce(x, offsets, op)
    expected, scale = _expected_segment(x, offsets, op, 0)
    assert_close(got, expected, scale=scale)
    assert torch.equal(got, pp.segment_reduce(x, offsets, op))


@pytest.mark.parametrize("op", ("sum", "mean", "max"))
def test_segment_reduce_features_repeatable(op, device):
    """Many short sequences and a few long ones over (T, 8) features: on CUDA the pieces of the
    columns pass finish in a different order from call to call, and the sequences that cross them
    must come out with the same bits every time (a float sum in a fixed order)."""
    g = torch.Generator().manual_seed(12)
    lengths = torch.randint(0, 40, (3000,), generator=g).tolist() + [2000, 0, 700] + [5] * 100
    offsets = make_offsets(lengths, device=device)
    x = draw((sum(lengths), 8), DRAW_OP[op], torch.float32, "normal", device)
    first = pp.segment_reduce(x, offsets, op)
    expected, scale = _expected_segment(x, offsets, op, 0)
    assert_close(first, expected, scale=scale)
    for _ in range(5):
        assert torch.equal(first, pp.segment_reduce(x, offsets, op))


def test_segment_reduce_long_mean_count_is_exact(device):
    """The mean divides by an integer count: a float32 count would stop at 2^24 elements.

    The values alternate +1, -1 (every partial sum is a small integer, exact in any order) and
    end with two +1, so the long segment's mean is 1 / (its length); a count stuck at 2^24 would
    give twice that."""
    n = (1 << 25) + 2
    x = torch.ones(n, device=device)
    x[1::2] = -1
    x[-1] = 1
    offsets = torch.tensor([0, 3, n], device=device)
    got = pp.segment_reduce(x, offsets, "mean").double().cpu()
    want = torch.tensor([1 / 3, 1 / (n - 3)], dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)


def test_segment_reduce_small_for_sanitizer(device):
    """A small case of every op, dtype group and kernel path for compute-sanitizer."""
    offsets = torch.tensor([0, 3, 3, 7, 40], device=device)
    for op in OPS:
        for shape in ((40,), (40, 3), (40, 40)):
            x = torch.randn(shape, device=device)
            assert_close(pp.segment_reduce(x, offsets, op), ref.segment_reduce(x.cpu(), offsets.cpu(), op),
                         scale=1 + ref.segment_reduce(x.cpu().abs(), offsets.cpu(), "sum"), rtol=1e-4)
    x = torch.randint(-5, 5, (40, 2), device=device, dtype=torch.int32)
    assert torch.equal(pp.segment_reduce(x, offsets, "sum").cpu(), ref.segment_reduce(x.cpu(), offsets.cpu(), "sum"))


def test_segment_reduce_cu_seqlens_alias(device):
    x = torch.randn(10, 2, device=device)
    offsets = torch.tensor([0, 4, 10], device=device)
    assert torch.equal(pp.segment_reduce(x, cu_seqlens=offsets, op="max"), pp.segment_reduce(x, offsets, "max"))


# ---- gradients -----------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("values", ("normal", "ties", "zeros"))
def test_segment_reduce_gradcheck(op, values, device):
    lengths = [3, 0, 1, 5, 2]
    x = draw((sum(lengths), 2), DRAW_OP[op], torch.float64, values, device)
    if values == "zeros":  # one zero in one sequence, two in another
        x[3, 0] = 0
        x[4, 1] = x[6, 1] = 0
    offsets = make_offsets(lengths, device=device)
    if values != "normal" and op in ("max", "min"):
        # Numerical differentiation moves tied elements apart; the analytic gradient goes to the
        # first of ties (checked below), so gradcheck gets distinct values.
        x = x + torch.arange(x.numel(), device=device).view(x.shape) * 1e-3
    x.requires_grad_(True)
    # Empty sequences of max/min/logsumexp give infinities: compared as zeros.
    out = pp.segment_reduce(x.detach(), offsets, op)
    finite_out = out.isfinite()
    torch.autograd.gradcheck(lambda t: pp.segment_reduce(t, offsets, op).masked_fill(~finite_out, 0), (x,))


@pytest.mark.parametrize("op", ("max", "min"))
def test_segment_reduce_ties_go_to_the_first(op, device):
    x = torch.tensor([1.0, 3.0, 3.0, 2.0, 5.0, 5.0, float("nan"), float("nan")], device=device)
    if op == "min":
        x = -x
    offsets = torch.tensor([0, 4, 6, 8], device=device)
    x.requires_grad_(True)
    pp.segment_reduce(x, offsets, op).backward(torch.tensor([10.0, 20.0, 30.0], device=device))
    assert x.grad.tolist() == [0.0, 10.0, 0.0, 0.0, 20.0, 0.0, 30.0, 0.0]


def test_segment_reduce_prod_grad_with_zeros(device):
    x = torch.tensor([2.0, 0.0, 3.0, 0.0, 0.0, 5.0, 4.0, 0.5], device=device, requires_grad=True)
    offsets = torch.tensor([0, 3, 6, 8], device=device)
    pp.segment_reduce(x, offsets, "prod").sum().backward()
    assert x.grad.tolist() == [0.0, 6.0, 0.0, 0.0, 0.0, 0.0, 0.5, 4.0]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_segment_reduce_grad_matches_reference(op, dtype, device):
    """Gradients against autograd through the float64 reference (no ties: amax splits them)."""
    lengths = [5, 0, 17, 1, 40]
    x = draw((sum(lengths), 3), DRAW_OP[op], dtype, "normal", device).requires_grad_(True)
    offsets = make_offsets(lengths, device=device)
    w = torch.randn(len(lengths), 3, device=device, dtype=torch.float64)
    out = pp.segment_reduce(x, offsets, op)
    w = torch.where(out.detach().isfinite(), w, 0)
    (g,) = torch.autograd.grad(out.double().mul(w).sum(), x)
    xr = x.detach().cpu().double().requires_grad_(True)
    (want,) = torch.autograd.grad(ref.segment_reduce(xr, offsets.cpu(), op).mul(w.cpu()).nan_to_num(0).sum(), xr)
    assert g.dtype == dtype
    assert_close(g, want, scale=want.abs().amax() + 1, rtol=4 * tol(dtype))


# ---- opcheck, torch.compile, CUDA graphs --------------------------------------------------




@pytest.mark.parametrize("s", sample_params([s for s in SEGMENT_SAMPLES if s.values in FINITE], "check"))
def test_segment_reduce_opcheck(s, device):
    x, offsets, _ = s.make(device)
    if s.dtype.is_floating_point:
        x.requires_grad_(True)
    torch.library.opcheck(_ops.segment_reduce.default, (x, offsets, s.op, s.dim), test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("s", sample_params([s for s in SEGMENT_SAMPLES if s.dtype.is_floating_point], "compile"))
def test_segment_reduce_compile(s, device):
    """fullgraph: no graph break, forward and backward."""
    torch._dynamo.reset()
    x, offsets, _ = s.make(device)
    x = x.detach().requires_grad_(True)

    def f(t, o):
        return pp.segment_reduce(t * 2, o, s.op, s.dim).sin()

    out, want = torch.compile(f, fullgraph=True)(x, offsets), f(x, offsets)
    torch.testing.assert_close(out, want, equal_nan=True)
    (g,) = torch.autograd.grad(out.nan_to_num(0).sum(), x)
    (want_g,) = torch.autograd.grad(want.nan_to_num(0).sum(), x)
    torch.testing.assert_close(g, want_g, equal_nan=True)


def test_ops_capture_in_cuda_graphs(device):
    if not device.startswith("cuda"):
        pytest.skip("CUDA graphs need a CUDA device")
    x = torch.randn(5000, 4, device=device)
    offsets = make_offsets([1000, 0, 3000, 1000], dtype=torch.int32, device=device)
    mask = torch.rand(5000, 4, device=device) > 0.3
    # Long sequences in a 1-D tensor: the stream pass and its fix-up, launched as dependents.
    long_x = torch.randn(200_000, device=device)
    long_offsets = make_offsets([70_000, 0, 80_000, 50_000], dtype=torch.int64, device=device)
    calls = {
        "segment_reduce": (lambda: pp.segment_reduce(x, offsets, "logsumexp"),
                           lambda: ref.segment_reduce(x.cpu(), offsets.cpu(), "logsumexp")),
        "segment_reduce, long sequences": (lambda: pp.segment_reduce(long_x, long_offsets, "mean"),
                                           lambda: ref.segment_reduce(long_x.cpu(), long_offsets.cpu(), "mean")),
        "reduce": (lambda: pp.reduce(x, 0, "mean", mask), lambda: ref.reduce(x.cpu(), 0, "mean", mask.cpu())),
        "histogram": (lambda: pp.histogram(x[:, 0], 64, (-2.0, 2.0), offsets=offsets),
                      lambda: ref.histogram(x[:, 0].cpu(), 64, (-2.0, 2.0), offsets=offsets.cpu())),
    }
    for name, (fn, want) in calls.items():
        got = capture_cuda_graph(fn).cpu()
        torch.testing.assert_close(got, want().to(got.dtype), msg=name)


def test_invalid_offsets_stay_in_bounds_on_cuda(device):
    """With checks off, CUDA does not validate offsets: garbage in, garbage out, but every access
    stays in bounds (compute-sanitizer checks this run)."""
    if not device.startswith("cuda"):
        pytest.skip("the CPU always validates offsets")
    bad = torch.tensor([3, -7, 100, 2], device=device)
    x = torch.randn(10, 2, device=device)
    for op in OPS:
        pp.segment_reduce(x, bad, op)
    pp.histogram(x[:, 0], 8, (-1.0, 1.0), offsets=bad)
    pp.histogram(x[:, 0], 8, (-1.0, 1.0), weights=x[:, 1], offsets=bad)
    _ops._histogram_bin_index(x[:, 0], 8, -1.0, 1.0, bad)
    no_sequences = torch.zeros(1, dtype=torch.int64, device=device)  # claims none of the 10 elements
    assert pp.segment_reduce(x, no_sequences, "sum").shape == (0, 2)
    assert pp.histogram(x[:, 0], 8, (-1.0, 1.0), offsets=no_sequences).shape == (0, 8)
    assert _ops._histogram_bin_index(x[:, 0], 8, -1.0, 1.0, no_sequences).tolist() == [-1] * 10
    torch.cuda.synchronize()


def test_docstring_examples_run():
    import doctest

    from torch_parprims.ops import reduce as module

    result = doctest.testmod(module, raise_on_error=False, verbose=False)
    assert result.attempted > 0 and result.failed == 0
