"""The scaffold shared by the test files: op names, sample tables to pytest params, gradcheck
and opcheck settings, tolerances by dtype, comparison, input layouts, offsets, random draws."""
import math
from dataclasses import replace
from typing import Iterable, Sequence

import pytest
import torch

from torch_parprims import reference as ref

slow = pytest.mark.slow

# The scan operators, in the order the tests parametrize them.
OPS = ("add", "mul", "max", "min", "logaddexp")

# What torch.library.opcheck runs on the ops with autograd (for those without, the same less
# the autograd registration).
OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
OPCHECK_UTILS_NO_AUTOGRAD = tuple(u for u in OPCHECK_UTILS if u != "test_autograd_registration")


def sample_params(samples, mark_attr=None):
    """pytest params for a sample table: a sample is marked slow when it says so, or when
    `mark_attr` names a flag it lacks (e.g. "check" keeps opcheck to a few samples)."""
    return [pytest.param(s, id=str(s), marks=slow if (s.slow or (mark_attr and not getattr(s, mark_attr))) else ())
            for s in samples]


def grad_samples(samples, keep):
    """The gradcheck table: the samples that ``keep`` selects in double precision (complex128
    for complex ones), without their opcheck/compile flags, each once, in table order."""
    seen, out = set(), []
    for s in samples:
        if not keep(s):
            continue
        d = replace(s, dtype=torch.complex128 if s.dtype.is_complex else torch.float64, check=False, compile=False)
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
INTS = (torch.int32, torch.int64, torch.bool)
COMPLEX = (torch.complex64, torch.complex128)
HALF = (torch.float16, torch.bfloat16)

# Float scans on CUDA take a tile's carry-in from whichever predecessors have published (the
# decoupled look-back), so the rounding of long rows can differ between runs by a few ulps;
# gradcheck's reentrancy check gets this tolerance. torch.use_deterministic_algorithms(True)
# makes every op bitwise reproducible (test_determinism.py).
NONDET_TOL = 1e-10

# Allowed error, relative to a per-element magnitude `scale` (see assert_close). float32: far
# under 1e-5 of sum |x| for an add-type accumulation; half types: their rounding plus margin.
_TOL = {
    torch.float16: 2e-3,
    torch.bfloat16: 1e-2,
    torch.float32: 1e-5,
    torch.float64: 1e-12,
    torch.complex64: 1e-5,
    torch.complex128: 1e-12,
}

# The CPU engine splits a row longer than 2 * CPU_CHUNK into chunks (when there are fewer rows
# than threads); the CUDA engine uses several tiles per row beyond GPU_MULTI_TILE elements.
CPU_CHUNK = 1 << 15
GPU_MULTI_TILE = 1 << 17


def tol(dtype: torch.dtype) -> float:
    return _TOL.get(dtype, 0.0)


def _where(mask: torch.Tensor) -> str:
    idx = mask.nonzero()
    return f"{idx.shape[0]} element(s), first at {tuple(idx[0].tolist())}" if idx.numel() else "none"


def assert_close(actual, expected, *, scale=None, dtype=None, rtol=None, what="output"):
    """Compares a library result with a (wide) reference.

    Integers and bool: identical values and dtype. Floating and complex: NaN exactly where the
    reference has NaN (so a NaN never passes), infinities equal, and elsewhere
    ``|actual - expected| <= rtol * scale`` with ``rtol = tol(dtype)`` (``dtype`` defaults to
    ``actual``'s) and ``scale`` a per-element magnitude (default ``|expected|``; for an
    add-type accumulation, the same accumulation of ``|x|``). ``scale=0`` demands equality.
    """
    assert tuple(actual.shape) == tuple(expected.shape), f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    dtype = dtype or actual.dtype
    actual, expected = actual.detach().cpu(), expected.detach().cpu()
    if not (dtype.is_floating_point or dtype.is_complex):
        assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
        diff = actual != expected
        assert not diff.any(), (
            f"{what}: {_where(diff)} differ: {actual[diff][:5].tolist()} != {expected[diff][:5].tolist()}"
        )
        return
    wide = ref.wide_dtype(actual.dtype)
    a, e = actual.to(wide), expected.to(ref.wide_dtype(expected.dtype))
    nan_a, nan_e = a.isnan(), e.isnan()
    assert torch.equal(nan_a, nan_e), (
        f"{what}: unexpected NaN at {_where(nan_a & ~nan_e)}; missing NaN at {_where(nan_e & ~nan_a)}"
    )
    inf_e = e.isinf()
    bad_inf = (a.isinf() != inf_e) | (inf_e & (a != e))
    assert not bad_inf.any(), f"{what}: infinities differ at {_where(bad_inf)}"
    rtol = tol(dtype) if rtol is None else rtol
    if scale is None:
        scale = e.abs()
    scale = torch.as_tensor(scale).detach().cpu().to(torch.float64)
    scale = torch.where(scale.isfinite(), scale, torch.zeros((), dtype=torch.float64)).expand(e.shape)
    finite = ~(nan_e | inf_e)
    err = torch.where(finite, (a - e).abs(), torch.zeros((), dtype=torch.float64))
    bound = rtol * scale + 1e-300
    bad = err > bound
    if bad.any():
        ratio = torch.where(bad, err / bound, torch.zeros((), dtype=torch.float64))
        i = int(ratio.argmax())
        pos = tuple(torch.unravel_index(torch.tensor(i), e.shape)) if e.dim() else ()
        pos = tuple(int(p) for p in pos)
        raise AssertionError(
            f"{what} ({dtype}): {_where(bad)} out of tolerance; worst at {pos}: actual "
            f"{a.reshape(-1)[i].item()}, expected {e.reshape(-1)[i].item()}, allowed error "
            f"{bound.reshape(-1)[i].item():.3g} (rtol {rtol:g} x scale {scale.reshape(-1)[i].item():.3g})"
        )


# ---- layouts -----------------------------------------------------------------------------

VIEWS = ("contiguous", "transpose", "step", "expand")


def poison_value(dtype: torch.dtype):
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    return 1 << 20


def with_layout(t: torch.Tensor, view: str, dim: int) -> torch.Tensor:
    """``t`` in another memory layout, read by the op without a copy.

    transpose: the same values with permuted strides; step: every other element along ``dim``
    of a buffer whose skipped elements are NaN (or a large integer), so that a misread shows;
    expand: the first slice along another dimension broadcast with stride 0 (new values);
    shifted: contiguous, one element into a buffer (misaligned for wide accesses)."""
    if view == "contiguous" or t.dim() == 0:
        return t.contiguous()
    dim = dim % t.dim()
    others = [d for d in range(t.dim()) if d != dim]
    if view == "transpose":
        if not others:
            return t.contiguous()
        other = others[-1]
        return t.transpose(dim, other).contiguous().transpose(dim, other)
    if view == "step":
        shape = list(t.shape)
        shape[dim] *= 2
        buf = torch.full(shape, poison_value(t.dtype), dtype=t.dtype, device=t.device)
        index = [slice(None)] * t.dim()
        index[dim] = slice(0, None, 2)
        out = buf[tuple(index)]
        out.copy_(t)
        return out
    if view == "expand":
        others = [d for d in others if t.size(d) > 1]
        if not others:
            return t.contiguous()
        return t.narrow(others[0], 0, 1).expand(t.shape)
    if view == "shifted":
        buf = torch.full((t.numel() + 1,), poison_value(t.dtype), dtype=t.dtype, device=t.device)
        out = buf[1:].view(t.shape)
        out.copy_(t)
        return out
    raise ValueError(view)


# ---- offsets -----------------------------------------------------------------------------


def make_offsets(lengths: Sequence[int], dtype=torch.int64, device="cpu") -> torch.Tensor:
    out = [0]
    for n in lengths:
        out.append(out[-1] + int(n))
    return torch.tensor(out, dtype=dtype, device=device)


def random_lengths(count: int, mean: int, empty_fraction: float = 0.25) -> list:
    """``count`` random sequence lengths around ``mean``, a fraction of them empty."""
    lengths = torch.randint(1, 2 * mean + 1, (count,))
    lengths[torch.rand(count) < empty_fraction] = 0
    return lengths.tolist()


def pad_to(lengths: list, total: int) -> list:
    """``lengths`` and one more sequence that brings the total to at least ``total``."""
    return lengths + [max(0, total - sum(lengths))]


def tile_edge_lengths(tiles: int = 48) -> list:
    """Sequences whose bounds fall on a multiple of 512 positions (the GPU row loop's tiles are 512
    or 2048 long) or one off it, with an empty sequence at some of them: about ``tiles`` x 1024
    positions in all."""
    bounds = []
    for k in range(1, 2 * tiles):
        bound = 512 * k + int(torch.randint(-1, 2, ()))
        bounds += [bound] * (2 if k % 3 == 0 else 1)  # a repeated bound: an empty sequence
    bounds.append(512 * 2 * tiles + 7)
    return [b - a for a, b in zip([0] + bounds[:-1], bounds)]


def huge_and_tiny(huge: int, tiny: int) -> list:
    """One huge sequence among ``tiny`` sequences of length 0, 1 or 2."""
    lengths = torch.randint(0, 3, (tiny,)).tolist()
    lengths.insert(tiny // 3, huge)
    return lengths


LENGTH_PATTERNS = {
    "random": lambda: random_lengths(9, 12),
    "leading_trailing_empty": lambda: [0, 0, 5, 0, 17, 1, 0, 0],
    "single": lambda: [40],
    "all_length_one": lambda: [1] * 300,
    "one_nonempty": lambda: [0, 0, 0, 33, 0],
    "huge_and_tiny": lambda: huge_and_tiny(3000, 200),
    "all_empty": lambda: [0, 0, 0],
    "no_sequences": lambda: [],
    # Sequences crossing the CPU chunk boundaries, an empty one exactly on a boundary.
    "chunk_crossing": lambda: [CPU_CHUNK - 3, 0, 6, CPU_CHUNK + 5, 0, 2 * CPU_CHUNK + 1, 3],
    "chunk_crossing_short": lambda: [CPU_CHUNK - 3, 0, 6, CPU_CHUNK + 5, 0, 3],  # just over 2 chunks
    "gpu_multi_tile": lambda: huge_and_tiny(GPU_MULTI_TILE + 3, 1000),
    # About 1100 positions: rows long enough for the GPU row loop, packed along them.
    "rows_1100": lambda: pad_to(random_lengths(80, 12), 1100),
    # Sequence bounds on and next to the GPU row loop's tile edges, empty sequences there.
    "tile_edges": lambda: tile_edge_lengths(),
    # Thousands of sequences of 0-8 positions in one long row: a GPU tile holds more sequence
    # starts than its block has threads.
    "many_tiny": lambda: torch.randint(0, 9, (12000,)).tolist(),
}
# Patterns whose total length sends one row down the long-row paths, and those with many sequences.
LONG_PATTERNS = ("chunk_crossing", "chunk_crossing_short", "gpu_multi_tile", "tile_edges", "many_tiny")
BIG_PATTERNS = LONG_PATTERNS + ("huge_and_tiny", "all_length_one")


# ---- scan inputs and scales --------------------------------------------------------------


def draw(shape, op: str, dtype: torch.dtype, values: str = "normal", device="cpu") -> torch.Tensor:
    """Random input for a scan of ``op``; ``values``: normal, nan, inf, ties or zeros."""
    shape = tuple(shape)
    if dtype == torch.bool:
        return (torch.rand(shape) < 0.5).to(device)
    if not (dtype.is_floating_point or dtype.is_complex):
        if op == "add":
            high = (1 << 40) if dtype == torch.int64 else 1000  # int64: catches 32-bit accumulation
            return torch.randint(-high, high, shape, dtype=dtype).to(device)
        return torch.randint(-50, 50, shape, dtype=dtype).to(device)
    x = torch.randn(shape, dtype=torch.float64)
    if op == "mul":  # magnitudes near 1 so long products stay in range; both signs
        x = torch.exp(0.02 * x) * torch.where(torch.rand(shape) < 0.5, -1.0, 1.0).double()
    elif op == "logaddexp":
        x = 3 * x
    if dtype.is_complex:
        x = torch.complex(x, torch.randn(shape, dtype=torch.float64))
    if values == "ties":
        x = torch.randint(-3, 4, shape).double()
    elif values == "zeros":
        x[torch.rand(shape) < 0.1] = 0
    elif values == "nan":
        x[torch.rand(shape) < 0.03] = float("nan")
    elif values == "inf":
        r = torch.rand(shape)
        x[r < 0.05] = float("-inf")
        if op != "logaddexp":
            x[r > 0.97] = float("inf")
    return x.to(dtype).to(device)


def scan_scale(x, offsets, dim, op, exclusive, reverse, expected):
    """The magnitude the error of a floating scan is measured against, per element."""
    count = ref.segmented_scan(torch.ones(x.shape, dtype=torch.float64, device=x.device), offsets, dim,
                               "add", exclusive, reverse).cpu()
    expected = expected.detach().cpu()
    finite = lambda t: torch.where(t.isfinite(), t, torch.zeros((), dtype=t.dtype))
    if op == "add":  # the same accumulation of |x|
        return ref.segmented_scan(finite(x.detach().abs()), offsets, dim, "add", exclusive, reverse).cpu()
    if op in ("max", "min"):  # exact
        return torch.zeros(x.shape, dtype=torch.float64)
    if op == "mul":  # relative, growing like a random walk with the number of factors
        return finite(expected.abs()) * count.clamp(min=1).sqrt()
    if op == "logaddexp":
        return (finite(expected.abs()) + 1) * count.clamp(min=1).sqrt()
    raise ValueError(op)


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Norm-wise relative error ``||actual - expected|| / ||expected||``, in float64."""
    return float((actual.double() - expected).norm() / expected.norm())


def magnitude(t: torch.Tensor) -> torch.Tensor:
    """The largest finite ``|t|`` (0 for an empty tensor): a scale for norm-wise comparisons."""
    a = t.detach().abs().to(torch.float64)
    a = torch.where(a.isfinite(), a, torch.zeros((), dtype=a.dtype, device=a.device))
    return a.amax() if a.numel() else torch.zeros((), dtype=torch.float64)


def finite_mask_fn(fn, *args):
    """``fn`` with outputs that are infinite at ``args`` replaced by zeros (gradcheck of
    exclusive max/min/logaddexp, whose identity is infinite)."""
    with torch.no_grad():
        outs = fn(*args)
    single = isinstance(outs, torch.Tensor)
    masks = [o.isfinite() for o in ([outs] if single else outs)]

    def masked(*inner):
        res = fn(*inner)
        res = [res] if single else list(res)
        res = [r.masked_fill(~m, 0) if r.is_floating_point() else r for r, m in zip(res, masks)]
        return res[0] if single else tuple(res)

    return masked


def assert_same_as_eager(outs, eager_outs, grads, eager_grads):
    """A torch.compile'd call against the eager one: outputs and gradients, to rounding."""
    assert len(outs) == len(eager_outs) and len(grads) == len(eager_grads)
    for o, e in zip(outs, eager_outs):
        assert_close(o, e, scale=e.abs() + 1)
    for g, e in zip(grads, eager_grads):
        assert_close(g, e, scale=magnitude(e) + 1, what="grad")


def grad_weights(out: torch.Tensor) -> torch.Tensor:
    """Random cotangents for a backward pass, finite where ``out`` is finite."""
    w = torch.randn(out.shape, dtype=ref.wide_dtype(out.dtype), device=out.device).to(out.dtype)
    return torch.where(out.isfinite(), w, torch.zeros((), dtype=out.dtype, device=out.device))


def grad_leaf(x: torch.Tensor):
    """``(leaf, to_input)`` for gradcheck: a broadcast (stride-0) input becomes its one slice,
    expanded again inside the checked function; other layouts are kept as they are."""
    for d in range(x.dim()):
        if x.stride(d) == 0 and x.size(d) > 1:
            leaf = x.detach().narrow(d, 0, 1).clone().requires_grad_()
            return leaf, lambda t: t.expand(x.shape)
    return x.detach().requires_grad_(), lambda t: t


def numel(shape: Iterable[int]) -> int:
    return math.prod(shape)


def capture_cuda_graph(fn, *args):
    """Runs ``fn(*args)`` inside a CUDA graph capture (which fails on any host synchronization),
    replays it once and returns the graph's outputs. A warm-up call outside the capture does the
    allocations and lazy initialization first."""
    fn(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    graph.replay()
    torch.cuda.synchronize()
    return out


def raises(pattern):
    return pytest.raises(RuntimeError, match=pattern)


def other_device(device):
    """A device other than `device`, or skip."""
    if device.startswith("cuda"):
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    pytest.skip("a device mismatch needs a second device (CUDA)")


def check_bad_case(cases, case, device):
    """``cases[case]`` is (a call given the device, the message pattern its RuntimeError has)."""
    call, pattern = cases[case]
    with raises(pattern):
        call(device)


def strided_copy(x):
    """The values of x in a tensor whose last dim has stride 2 (a row read element by element
    where a contiguous one is read in blocks or vectors)."""
    wide = torch.empty(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype, device=x.device)
    wide[..., ::2] = x
    return wide[..., ::2]
