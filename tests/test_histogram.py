"""histogram: exact counts against torch.histc and torch.bincount, the float64 reference for
weights and per-sequence histograms, bin edges, NaN and infinities, counts past 2^24, the
gradient with respect to weights, opcheck and torch.compile."""
from dataclasses import dataclass

import pytest
import torch

import torch_parprims as pp
from torch_parprims import reference as ref

from helpers import LENGTH_PATTERNS, OPCHECK_UTILS, assert_close, make_offsets, sample_params

_ops = torch.ops.parprims


def interior_values(n, bins, lo, hi, dtype, device, skew=0.0):
    """Values inside bins, never near an edge (so that any order of the bin arithmetic agrees):
    centres of 8 sub-cells per bin. ``skew``: the fraction of values put in one bin."""
    cell = torch.randint(0, bins * 8, (n,), device=device)
    if skew:
        cell = torch.where(torch.rand(n, device=device) < skew, min(3, bins - 1) * 8 + 4, cell)
    return ((cell.double() + 0.5) / (bins * 8) * (hi - lo) + lo).to(dtype)


@dataclass(frozen=True)
class HistogramSample:
    n: int = 1000
    bins: int = 16
    range: tuple = (-2.0, 3.0)
    dtype: torch.dtype = torch.float32
    values: str = "normal"  # normal | interior | skewed | specials (edges, outside, NaN, inf)
    weights: object = None  # None or a weights dtype
    pattern: object = None  # None (one histogram) or a helpers.LENGTH_PATTERNS entry
    slow: bool = False
    check: bool = False
    compile: bool = False

    def __str__(self):
        dtype = str(self.dtype).replace("torch.", "")
        w = "counts" if self.weights is None else "w_" + str(self.weights).replace("torch.", "")
        return f"{self.n}-{self.bins}bins-{dtype}-{self.values}-{w}-{self.pattern or 'one'}"

    def make(self, device):
        offsets = None
        n = self.n
        if self.pattern is not None:
            lengths = LENGTH_PATTERNS[self.pattern]()
            n = sum(lengths)
            offsets = make_offsets(lengths, device=device)
        lo, hi = self.range
        if self.values in ("interior", "skewed"):
            x = interior_values(n, self.bins, lo, hi, self.dtype, device, 0.9 if self.values == "skewed" else 0.0)
        else:
            x = (torch.randn(n, device=device, dtype=torch.float64) * 2).to(self.dtype)
        if self.values == "specials" and n >= 8:
            x[:8] = torch.tensor([lo, hi, lo - 1e-3, hi + 1e-3, float("nan"), float("inf"), -float("inf"), hi],
                                 dtype=torch.float64).to(self.dtype)
        w = None if self.weights is None else torch.randn(n, device=device).to(self.weights)
        return x, w, offsets


def _samples():
    S = HistogramSample
    out = [
        S(check=True),
        S(values="specials", check=True),
        S(values="interior", n=100_000, bins=256),
        S(values="skewed", n=100_000, bins=256),
        S(n=0),
        S(n=1, values="interior"),
        S(bins=1, values="specials"),
        S(bins=10_000, n=50_000),  # more bins than the CUDA kernel keeps in shared memory
        S(weights=torch.float32, check=True, compile=True),
        S(weights=torch.float64, dtype=torch.float64, values="specials"),
        S(weights=torch.bfloat16, values="skewed", n=5000),
        S(pattern="random", check=True),
        S(pattern="random", weights=torch.float32, check=True),
        S(pattern="huge_and_tiny", values="skewed"),
        S(pattern="huge_and_tiny", weights=torch.float64),
        S(pattern="all_empty"),
        S(pattern="no_sequences"),
        S(pattern="leading_trailing_empty", values="specials"),
        S(pattern="gpu_multi_tile", values="interior", bins=64, slow=True),
    ]
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        out.append(S(dtype=dtype, values="specials"))
    return out


SAMPLES = _samples()


@pytest.mark.parametrize("s", sample_params(SAMPLES))
def test_histogram_matches_reference(s, device):
    x, w, offsets = s.make(device)
    got = pp.histogram(x, s.bins, s.range, weights=w, offsets=offsets)
    want = ref.histogram(x.cpu(), s.bins, s.range, None if w is None else w.cpu(),
                         None if offsets is None else offsets.cpu())
    if w is None:
        assert got.dtype == torch.int64
        assert torch.equal(got.cpu(), want)
    else:
        assert got.dtype == (torch.float64 if w.dtype == torch.float64 else torch.float32)
        absw = ref.histogram(x.cpu(), s.bins, s.range, w.cpu().abs(), None if offsets is None else offsets.cpu())
        assert_close(got, want, scale=absw)  # the same sums of |w|


@pytest.mark.parametrize("bins", (1, 7, 256))
@pytest.mark.parametrize("skew", (0.0, 0.9))
def test_histogram_equals_histc_and_bincount(bins, skew, device):
    lo, hi = -1.5, 2.5
    x = interior_values(20_000, bins, lo, hi, torch.float32, device, skew)
    got = pp.histogram(x, bins, (lo, hi))
    assert torch.equal(got, torch.histc(x, bins, lo, hi).long())
    index = ((x.double() - lo) / (hi - lo) * bins).long()
    assert torch.equal(got, torch.bincount(index, minlength=bins))


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
@pytest.mark.parametrize("bins,lo,hi", ((97, -3.7, 11.3), (256, 0.0, 1.0), (10, 0.1, 0.7), (1000, -1e3, 1e-3)))
def test_histogram_bin_edges_agree_with_histc(bins, lo, hi, dtype, device):
    """Values on every bin edge and one ulp either side land where torch.histc puts them (the
    kernels multiply by 1 / (hi - lo) and divide only near an edge)."""
    edges = torch.linspace(lo, hi, bins + 1, dtype=torch.float64).to(dtype)
    k = torch.arange(bins + 1, dtype=dtype)
    exact = (lo + k * ((hi - lo) / bins)).to(dtype)  # the edges as the bin formula sees them
    values = torch.cat([edges, exact])
    inf = torch.tensor(float("inf"), dtype=dtype)
    x = torch.cat([values, torch.nextafter(values, inf), torch.nextafter(values, -inf)])
    x = x[(x >= lo) & (x <= hi)]
    got = pp.histogram(x.to(device), bins, (lo, hi))
    assert torch.equal(got.cpu(), torch.histc(x, bins, lo, hi).long())


def _edges_and_specials(bins, lo, hi, dtype, gen, n_uniform):
    """Every bin edge (both forms) and 3 ulps either side, the range's ends and values just
    outside, NaN, infinities, huge and subnormal values, uniform values over a wider range, and
    runs of one value, shuffled (the runs kept whole)."""
    e = torch.cat([torch.linspace(lo, hi, bins + 1, dtype=torch.float64),
                   lo + torch.arange(bins + 1, dtype=torch.float64) * ((hi - lo) / bins)]).to(dtype)
    inf = torch.tensor(float("inf"), dtype=dtype)
    parts = [e]
    for direction in (inf, -inf):
        v = e
        for _ in range(3):
            v = torch.nextafter(v, direction)
            parts.append(v)
    w = hi - lo
    parts.append(torch.tensor([float("nan"), float("inf"), -float("inf"), 3e38, -3e38, 0.0, -0.0, 1e-45, -1e-45, 1e-40,
                               lo, hi, lo - w * 1e-3, hi + w * 1e-3, lo - w, hi + w], dtype=torch.float64).to(dtype).repeat(20))
    parts.append(((torch.rand(n_uniform, generator=gen, dtype=torch.float64) * 1.2 - 0.1) * w + lo).to(dtype))
    x = torch.cat(parts)
    x = x[torch.randperm(x.numel(), generator=gen)]
    runs = [torch.full((int(r),), lo + w * f, dtype=torch.float64).to(dtype)
            for r, f in zip(torch.randint(1, 400, (40,), generator=gen), torch.rand(40, generator=gen, dtype=torch.float64))]
    runs += [torch.full((3000,), hi, dtype=dtype), torch.full((300,), float("nan"), dtype=dtype),
             torch.full((300,), hi + w, dtype=torch.float64).to(dtype)]
    pieces = list(x.split(max(1, x.numel() // len(runs))))
    return torch.cat([t for pair in zip(pieces, runs) for t in pair] + pieces[len(runs):])


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.bfloat16, torch.float64))
@pytest.mark.parametrize("bins,lo,hi", ((1, 0.0, 1.0), (7, -1.5, 2.5), (97, -3.7, 11.3), (256, 0.0, 1.0),
                                        (1000, 1000.0, 1001.0), (8191, -5.0, 7.0)))
def test_histogram_full_tiles_edges_and_specials(bins, lo, hi, dtype, device):
    """Edges, specials and runs over several full tiles of 4096 values and a partial one: the CUDA
    kernel's lean path takes the full tiles of a 16-byte-aligned x; the same values one element
    later (not 16-byte aligned) take the general path."""
    gen = torch.Generator().manual_seed(bins)
    x = _edges_and_specials(bins, lo, hi, dtype, gen, 30_000).to(device)
    shifted = torch.empty(x.numel() + 1, dtype=dtype, device=device)
    shifted[1:] = x
    for v in (x, shifted[1:]):
        got = pp.histogram(v, bins, (lo, hi))
        assert torch.equal(got.cpu(), ref.histogram(v.cpu(), bins, (lo, hi)))


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16))
def test_histogram_many_tiles_per_block(dtype, device):
    """More tiles than CUDA blocks (each block's lean path walks a run of tiles, the next one's
    loads in flight), with edges and specials among uniform values."""
    gen = torch.Generator().manual_seed(5)
    x = _edges_and_specials(256, -3.0, 3.0, dtype, gen, 5 * 2**20).to(device)
    got = pp.histogram(x, 256, (-3.0, 3.0))
    assert torch.equal(got.cpu(), ref.histogram(x.cpu(), 256, (-3.0, 3.0)))


def test_histogram_edges_and_specials(device):
    x = torch.tensor([0.0, 1.0, 0.5, -0.1, 1.1, float("nan"), float("inf"), -float("inf"), 0.25], device=device)
    assert pp.histogram(x, 4, (0.0, 1.0)).tolist() == [1, 1, 1, 1]  # 1.0 (hi) goes to the last bin
    assert pp.histogram(x, 4, (0.0, 1.0)).tolist() == torch.histc(x[~x.isnan()], 4, 0.0, 1.0).long().tolist()


def test_histogram_count_past_2_pow_24_is_exact(device):
    """A float32 count stops at 2^24; int64 counts do not (torch.histc's float32 counts would)."""
    n = (1 << 24) + 3
    x = torch.full((n,), 0.3, device=device)
    got = pp.histogram(x, 4, (0.0, 1.0))
    assert got.tolist() == [0, n, 0, 0]
    assert pp.histogram(x, 4, (0.0, 1.0), offsets=torch.tensor([0, 5, n], device=device)).tolist() == \
        [[0, 5, 0, 0], [0, n - 5, 0, 0]]


def test_histogram_small_for_sanitizer(device):
    x = torch.randn(300, device=device)
    offsets = torch.tensor([0, 10, 10, 299, 300], device=device, dtype=torch.int32)
    for w in (None, torch.rand(300, device=device)):
        for o in (None, offsets):
            got = pp.histogram(x, 9, (-1.0, 1.0), w, o)
            want = ref.histogram(x.cpu(), 9, (-1.0, 1.0), None if w is None else w.cpu(), None if o is None else o.cpu())
            torch.testing.assert_close(got.cpu(), want.to(got.dtype))
    index = _ops._histogram_bin_index(x, 9, -1.0, 1.0, offsets)
    assert index.shape == x.shape and int(index.max()) < 4 * 9


@pytest.mark.parametrize("per_sequence", (False, True))
def test_histogram_weights_gradcheck(per_sequence, device):
    x = torch.randn(40, dtype=torch.float64, device=device)
    x[:3] = torch.tensor([float("nan"), 5.0, 1.0])  # skipped, skipped, the closed last edge
    w = torch.randn(40, dtype=torch.float64, device=device, requires_grad=True)
    offsets = torch.tensor([0, 10, 10, 40], device=device) if per_sequence else None
    torch.autograd.gradcheck(lambda t: pp.histogram(x, 6, (-1.0, 1.0), t, offsets), (w,))


def test_histogram_weights_grad_values(device):
    x = torch.tensor([0.1, 0.9, 2.0, 0.6, float("nan")], device=device)
    w = torch.ones(5, device=device, requires_grad=True)
    out = pp.histogram(x, 2, (0.0, 1.0), w, torch.tensor([0, 2, 5], device=device))
    out.backward(torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=device))
    assert w.grad.tolist() == [1.0, 2.0, 0.0, 4.0, 0.0]


@pytest.mark.parametrize("s", sample_params(SAMPLES, "check"))
def test_histogram_opcheck(s, device):
    x, w, offsets = s.make(device)
    if w is not None:
        w.requires_grad_(True)
    torch.library.opcheck(_ops.histogram.default, (x, s.bins, *s.range, w, offsets), test_utils=OPCHECK_UTILS)
    torch.library.opcheck(_ops._histogram_bin_index.default, (x, s.bins, *s.range, offsets),
                          test_utils=OPCHECK_UTILS[:1] + OPCHECK_UTILS[2:])


@pytest.mark.parametrize("s", sample_params(SAMPLES, "compile"))
def test_histogram_compile(s, device):
    torch._dynamo.reset()
    x, w, offsets = s.make(device)
    if w is not None:
        w.requires_grad_(True)

    def f(v, weights):
        return pp.histogram(v * 1.0, s.bins, s.range, weights, offsets)

    out, want = torch.compile(f, fullgraph=True)(x, w), f(x, w)
    torch.testing.assert_close(out, want)
    if w is not None:
        (g,) = torch.autograd.grad((out * out).sum(), w)
        (want_g,) = torch.autograd.grad((want * want).sum(), w)
        torch.testing.assert_close(g, want_g)


def test_histogram_under_deterministic_algorithms(device):
    """Counts are exact and reproducible; CUDA weight sums add in atomic order, so the weighted
    form raises there, as index_add_ does."""
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        x, w = torch.randn(5000, device=device), torch.rand(5000, device=device)
        assert torch.equal(pp.histogram(x, 10, (-1.0, 1.0)), pp.histogram(x, 10, (-1.0, 1.0)))
        if device.startswith("cuda"):
            with pytest.raises(RuntimeError, match="torch_parprims.histogram with weights on CUDA"):
                pp.histogram(x, 10, (-1.0, 1.0), w)
        else:
            assert torch.equal(pp.histogram(x, 10, (-1.0, 1.0), w), pp.histogram(x, 10, (-1.0, 1.0), w))
    finally:
        torch.use_deterministic_algorithms(was)
