"""compact, segmented_compact, unpad/pad and the offsets helpers: reference comparison (x[mask],
torch.nonzero, loops over sequences), edge cases, gradcheck, opcheck, torch.compile and CUDA
graph capture of the sync-free forms."""
import itertools
from dataclasses import dataclass

import pytest
import torch

import torch_parprims as pp
from torch_parprims import reference as ref

from helpers import OPCHECK_UTILS, capture_cuda_graph, make_offsets, random_lengths, sample_params

_ops = torch.ops.parprims

# The CUDA select kernel's tile is 256 threads x 16 items for 4-byte elements (x 8 for 8-byte
# and x 4 for 16-byte ones); sizes around a tile and several tiles.
SIZES = (0, 1, 31, 33, 2047, 4095, 4096, 4097, 3 * 4096 + 5)


@dataclass(frozen=True)
class CompactSample:
    shape: tuple
    dim: int = 0
    slices: bool = False  # a 1-D mask along `dim` instead of an elementwise one
    density: str = "half"  # half | all | none | sparse
    dtype: torch.dtype = torch.float32
    capacity: str = "exact"  # exact | more | less | zero
    view: str = "contiguous"  # contiguous | transpose
    slow: bool = False
    check: bool = False  # opcheck in the default run
    compile: bool = False  # torch.compile in the default run

    def __str__(self):
        shape = "x".join(map(str, self.shape)) or "scalar"
        kind = f"slices{self.dim}" if self.slices else "elements"
        dtype = str(self.dtype).replace("torch.", "")
        return f"{shape}-{kind}-{self.density}-{dtype}-{self.capacity}-{self.view}"

    def make(self, device):
        if self.dtype == torch.bool:
            x = torch.rand(self.shape, device=device) > 0.5
        elif self.dtype.is_floating_point or self.dtype.is_complex:
            x = torch.randn(self.shape, dtype=self.dtype, device=device)
        else:
            x = torch.randint(-100, 100, self.shape, dtype=self.dtype, device=device)
        if self.view == "transpose" and x.dim() >= 2:
            x = x.transpose(0, 1).contiguous().transpose(0, 1)
        mask_shape = (x.shape[self.dim],) if self.slices else x.shape
        p = {"half": 0.5, "all": 1.0, "none": 0.0, "sparse": 0.05}[self.density]
        mask = torch.rand(mask_shape, device=device) < p
        return x, mask

    def capacity_for(self, count, total):
        return {"exact": None, "more": count + 7, "less": count // 2, "zero": 0}[self.capacity]


def _samples():
    S = CompactSample
    out = []
    for n in SIZES:
        out.append(S((n,), capacity="more" if n % 2 else "exact"))
    for density, cap in itertools.product(("half", "all", "none", "sparse"), ("exact", "more", "less", "zero")):
        out.append(S((2049,), density=density, capacity=cap, check=(density, cap) in (("half", "less"), ("all", "exact"))))
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.bool, torch.int8,
                  torch.complex64, torch.complex128):
        out.append(S((5, 67), dtype=dtype, capacity="less" if dtype.is_complex else "more"))
    # Elementwise masks over n-D and strided tensors (flat row-major positions).
    out.append(S((3, 4, 5), capacity="more", view="transpose", check=True, compile=True))
    out.append(S((), capacity="more"))
    out.append(S((), density="all"))
    out.append(S((0, 3), capacity="more"))
    # Slices along every dim.
    for dim, cap in itertools.product((0, 1, -1), ("exact", "more", "less")):
        out.append(S((6, 7, 3), dim=dim, slices=True, capacity=cap, view="transpose" if dim == 1 else "contiguous",
                     check=(dim, cap) == (1, "less"), compile=(dim, cap) == (0, "more")))
    out.append(S((4, 0), dim=0, slices=True, capacity="more"))
    out.append(S((0, 5), dim=0, slices=True, capacity="more"))
    out.append(S((40, 3), dim=0, slices=True, density="none", capacity="more"))
    out.append(S(((1 << 17) + 3,), capacity="less"))
    return out


SAMPLES = _samples()


def _run(s, x, mask, capacity, return_indices=True):
    if capacity is None:
        values, indices = pp.compact(x, mask, s.dim, return_indices=True)
        return values, None, indices
    return pp.compact(x, mask, s.dim, capacity=capacity, fill_value=7, return_indices=True)


@pytest.mark.parametrize("s", sample_params(SAMPLES))
def test_compact_matches_reference(s, device):
    x, mask = s.make(device)
    count = int(mask.sum())
    capacity = s.capacity_for(count, mask.numel())
    values, got_count, indices = _run(s, x, mask, capacity)
    want_values, want_count, want_indices = ref.compact(x.cpu(), mask.cpu(), s.dim, capacity, 7)
    assert values.dtype == x.dtype and values.device == x.device
    assert torch.equal(values.cpu(), want_values), "values"
    assert torch.equal(indices.cpu(), want_indices), "indices"
    if got_count is not None:
        assert got_count.shape == () and got_count.dtype == torch.int64 and got_count.device == x.device
        assert int(got_count) == want_count == count


@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if s.capacity == "exact"]))
def test_compact_equals_torch_indexing(s, device):
    """The exact form is x[mask] (elementwise) or x[..., mask, ...] (slices); indices are nonzero's."""
    x, mask = s.make(device)
    if s.slices:
        expected = x.index_select(s.dim, mask.nonzero().flatten())
        expected_indices = mask.nonzero().flatten()
    else:
        expected = x[mask]
        expected_indices = mask.reshape(-1).nonzero().flatten()
    assert torch.equal(pp.compact(x, mask, s.dim), expected)
    values, indices = pp.compact(x, mask, s.dim, return_indices=True)
    assert torch.equal(values, expected) and torch.equal(indices, expected_indices)


def test_compact_capacity_below_count_keeps_the_first(device):
    x = torch.arange(10.0, device=device)
    mask = x.remainder(3) != 1  # 0 2 3 5 6 8 9: 7 kept
    values, count, indices = pp.compact(x, mask, capacity=4, fill_value=-1, return_indices=True)
    assert values.tolist() == [0.0, 2.0, 3.0, 5.0] and count.item() == 7 and indices.tolist() == [0, 2, 3, 5]
    values, count = pp.compact(x, mask, capacity=9, fill_value=-1)
    assert values.tolist() == [0.0, 2.0, 3.0, 5.0, 6.0, 8.0, 9.0, -1.0, -1.0] and count.item() == 7


def test_compact_small_for_sanitizer(device):
    """A small case of every path (elements, slices, indices only, tails) for compute-sanitizer."""
    x = torch.randn(37, 3, device=device)
    mask = torch.rand(37, device=device) > 0.4
    count = int(mask.sum())
    for capacity in (0, count // 2, count, count + 5):
        v, c, i = pp.compact(x, mask, 0, capacity=capacity, return_indices=True)
        w, _, j = ref.compact(x.cpu(), mask.cpu(), 0, capacity, 0)
        assert torch.equal(v.cpu(), w) and torch.equal(i.cpu(), j) and int(c) == count
        v, c = pp.compact(x[:, 0], mask, capacity=capacity)
        assert torch.equal(v.cpu(), ref.compact(x[:, 0].cpu(), mask.cpu(), 0, capacity, 0)[0])
    assert torch.equal(pp.compact(x, mask.view(37, 1).expand(37, 3)), x[mask.view(37, 1).expand(37, 3)])


@pytest.mark.parametrize("dtype", (torch.bool, torch.bfloat16, torch.float32, torch.float64, torch.complex128))
@pytest.mark.parametrize("density", (0.5, 0.03, 0.97))
def test_compact_many_tiles(dtype, density, device):
    """Many tiles of the select kernel (their counts scanned into first slots), with data aligned
    to a thread's run (wide loads) and not (views at odd offsets: element loads), and capacities
    that end inside a tile."""
    n = 37 * 4096 + 1234
    base = torch.randn(n + 16, device=device).to(dtype) if dtype != torch.bool else torch.rand(n + 16, device=device) > 0.5
    flags = torch.rand(n + 16, device=device) < density
    for x, mask in ((base[:n], flags[:n]), (base[16:], flags[16:]), (base[3:n + 3], flags[5:n + 5])):
        want, want_indices = x[mask], mask.nonzero().flatten()
        count = want.numel()
        for capacity in (count, count // 3, count + 100):
            values, got, indices = pp.compact(x, mask, capacity=capacity, fill_value=1, return_indices=True)
            kept = min(capacity, count)
            assert int(got) == count
            assert torch.equal(values[:kept], want[:kept]) and torch.equal(indices[:kept], want_indices[:kept])
            assert bool((values[kept:] == 1).all()) and bool((indices[kept:] == -1).all())
        assert torch.equal(pp.compact(x, mask, capacity=count)[0], want)  # values only
        assert torch.equal(pp.compact(mask, mask, capacity=count, return_indices=True)[2], want_indices)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
def test_compact_more_tiles_than_blocks(dtype, device):
    """More tiles of the CUDA select kernel (4096 or 2048 positions) than the blocks that run
    at once on a large GPU."""
    n = (1 << 22) + 12345
    x = torch.randn(n, device=device, dtype=dtype)
    mask = torch.rand(n, device=device) < 0.5
    want, want_indices = x[mask], mask.nonzero().flatten()
    count = want.numel()
    for capacity in (count // 2, count + 1):
        values, got, indices = pp.compact(x, mask, capacity=capacity, return_indices=True)
        kept = min(capacity, count)
        assert int(got) == count
        assert torch.equal(values[:kept], want[:kept]) and torch.equal(indices[:kept], want_indices[:kept])
    assert torch.equal(pp.compact(x, mask), want)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64))
def test_compact_more_count_blocks_than_run_at_once(dtype, device):
    """More blocks of the CUDA count pass (8 x 4096 positions each) than an H200 runs at once,
    the last one partial; float64's scatter tiles (2048 positions) read every other slot group.
    A capacity that ends late."""
    if device == "cpu":
        pytest.skip("the count blocks are the CUDA kernel's; the CPU compacts in one scan, "
                    "covered at smaller sizes by test_compact_many_tiles")
    n = (5 << 23) + 777  # 1281 count blocks, the last one partial
    x = torch.randn(n, device=device, dtype=dtype)
    mask = torch.rand(n, device=device) < 0.7
    want, want_indices = x[mask], mask.nonzero().flatten()
    count = want.numel()
    for capacity in (count, count - 1000, count + 3):
        values, got, indices = pp.compact(x, mask, capacity=capacity, return_indices=True)
        kept = min(capacity, count)
        assert int(got) == count
        assert torch.equal(values[:kept], want[:kept]) and torch.equal(indices[:kept], want_indices[:kept])
    assert torch.equal(pp.compact(x, mask), want)


def test_compact_more_count_blocks_than_one_slots_round(device):
    """Past 2^28 positions the CUDA count blocks' totals (one per 32768 positions) take more
    than one round of the one-block scan that turns them into first slots (8192 a round)."""
    if device == "cpu":
        pytest.skip("the count blocks are the CUDA kernel's; the CPU compacts in one scan, "
                    "covered at smaller sizes by test_compact_many_tiles")
    n = (1 << 28) + (3 << 15) + 5  # 8196 count blocks: a second round of 4, the last partial
    x = torch.randint(-128, 127, (n,), device=device, dtype=torch.int8)
    mask = torch.rand(n, device=device) < 0.3
    want = x[mask]
    values, count = pp.compact(x, mask, capacity=n)
    assert int(count) == want.numel()
    assert torch.equal(values[: want.numel()], want) and bool((values[want.numel():] == 0).all())
    assert torch.equal(pp.compact(x, mask), want)


def test_sync_free_nonzero(device):
    """compact(mask, mask, capacity, return_indices) is nonzero_static with a count."""
    mask = torch.rand(3, 50, device=device) > 0.7
    _, count, indices = pp.compact(mask, mask, capacity=200, return_indices=True)
    expected = torch.nonzero_static(mask.reshape(-1), size=200, fill_value=-1).flatten()
    assert torch.equal(indices, expected) and int(count) == int(mask.sum())


# ---- gradients ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", ("elements", "elements-less", "slices", "slices-less", "empty"))
def test_compact_gradcheck(case, device):
    x = torch.randn(6, 5, dtype=torch.float64, device=device, requires_grad=True)
    slices = case.startswith("slices")
    mask = torch.rand((5,) if slices else (6, 5), device=device) > 0.4
    if case == "empty":
        mask = torch.zeros_like(mask)
    dim = 1 if slices else 0
    count = int(mask.sum())
    capacity = max(count - 2, 0) if case.endswith("less") else count + 2
    torch.autograd.gradcheck(lambda t: pp.compact(t, mask, dim), (x,))
    torch.autograd.gradcheck(lambda t: pp.compact(t, mask, dim, capacity=capacity, fill_value=3.0)[0], (x,))
    # Double backward: the backward is itself differentiable (its own backward compacts).
    torch.autograd.gradgradcheck(lambda t: pp.compact(t, mask, dim, capacity=capacity)[0], (x,))


def test_compact_backward_scatters_to_kept_positions(device):
    x = torch.randn(8, device=device, requires_grad=True)
    mask = torch.tensor([1, 0, 1, 1, 0, 0, 1, 1], dtype=torch.bool, device=device)
    values, _ = pp.compact(x, mask, capacity=3)
    values.backward(torch.tensor([1.0, 2.0, 3.0], device=device))
    assert x.grad.tolist() == [1.0, 0.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0]


# ---- opcheck, torch.compile, CUDA graphs --------------------------------------------------


@pytest.mark.parametrize("s", sample_params(SAMPLES, "check"))
def test_compact_opcheck(s, device):
    x, mask = s.make(device)
    if s.dtype.is_floating_point:
        x.requires_grad_(True)
    count = int(mask.sum())
    capacity = s.capacity_for(count, mask.numel())
    if capacity is None:
        torch.library.opcheck(_ops.compact.default, (x, mask, s.dim, True), test_utils=OPCHECK_UTILS)
    else:
        torch.library.opcheck(_ops.compact_capacity.default, (x, mask, capacity, s.dim, 1.5, True),
                              test_utils=OPCHECK_UTILS)


def test_helpers_opcheck(device):
    offsets = torch.tensor([0, 2, 2, 5], device=device, dtype=torch.int32)
    lengths = torch.tensor([2, 0, 3], device=device)
    flags = torch.tensor([True, False, True, False, False], device=device)
    x = torch.randn(5, 2, device=device, requires_grad=True)
    mask = torch.tensor([True, False, True, True, False], device=device)
    cases = [
        (_ops.offsets_from_lengths.default, (lengths, torch.int32)),
        (_ops.lengths_from_offsets.default, (offsets,)),
        (_ops.offsets_from_flags.default, (flags, 4, None)),
        (_ops.offsets_from_flags.default, (flags, None, torch.int32)),
        (_ops.flags_from_offsets.default, (offsets, 5)),
        (_ops.segment_ids_from_offsets.default, (offsets, 5)),
        (_ops.segmented_compact.default, (x, mask, offsets, 4, 0.0)),
        (_ops.segmented_compact.default, (x, mask, offsets, None, 0.0)),
        (_ops.pad.default, (x, torch.tensor([0, 3, 4, -1, 7], device=device), 2, 3)),
        (_ops._compact_backward.default, (x, mask, 0)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args, test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if s.dtype.is_floating_point], "compile"))
def test_compact_compile_capacity(s, device):
    """The capacity form traces with fullgraph (no sync, no graph break), forward and backward."""
    torch._dynamo.reset()
    x, mask = s.make(device)
    x.requires_grad_(True)
    capacity = int(mask.sum()) + 3

    def f(t, m):
        values, count = pp.compact(t, m, s.dim, capacity=capacity)
        return values * 2, count

    compiled = torch.compile(f, fullgraph=True, dynamic=True)
    (values, count), (want, want_count) = compiled(x, mask), f(x, mask)
    assert torch.equal(values, want) and torch.equal(count, want_count)
    (g,) = torch.autograd.grad(values.sum(), x)
    (want_g,) = torch.autograd.grad(want.sum(), x)
    assert torch.equal(g, want_g)


def test_compact_compile_exact(device):
    """The exact form's output size is data-dependent: the fake kernel gives a dynamic size."""
    torch._dynamo.reset()
    x = torch.randn(50, device=device, requires_grad=True)
    mask = x.detach() > 0
    compiled = torch.compile(lambda t, m: pp.compact(t, m).sin(), fullgraph=True)
    out = compiled(x, mask)
    torch.testing.assert_close(out, x[mask].sin())  # inductor's sin may round differently
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(g, torch.where(mask, x.detach().cos(), 0))


def test_helpers_compile(device):
    torch._dynamo.reset()
    offsets = torch.tensor([0, 2, 2, 5], device=device)

    def f(o, lengths, flags):
        return (pp.offsets_from_lengths(lengths), pp.lengths_from_offsets(o), pp.flags_from_offsets(o, 5),
                pp.segment_ids_from_offsets(o, 5), pp.offsets_from_flags(flags, capacity=4))

    args = (offsets, torch.tensor([1, 4], device=device), torch.tensor([True, False, True, True, False], device=device))
    for got, want in zip(torch.compile(f, fullgraph=True)(*args), f(*args)):
        assert torch.equal(got, want)


def test_sync_free_forms_capture_in_cuda_graphs(device):
    if not device.startswith("cuda"):
        pytest.skip("CUDA graphs need a CUDA device")
    x = torch.randn(4, 3000, device=device)
    mask = torch.rand(4, 3000, device=device) > 0.5
    offsets = make_offsets([1000, 0, 2000], device=device)
    lengths = torch.tensor([5, 0, 7], device=device, dtype=torch.int32)
    flags = torch.rand(3000, device=device) > 0.9
    calls = {
        "compact": (lambda: pp.compact(x, mask, capacity=9000, return_indices=True),
                    lambda: ref.compact(x.cpu(), mask.cpu(), 0, 9000, 0)),
        "compact_slices": (lambda: pp.compact(x, mask[0], 1, capacity=2000, return_indices=True),
                           lambda: ref.compact(x.cpu(), mask[0].cpu(), 1, 2000, 0)),
        "segmented_compact": (lambda: pp.segmented_compact(x[0], mask[0], offsets, capacity=3000),
                              lambda: ref.segmented_compact(x[0].cpu(), mask[0].cpu(), offsets.cpu(), 3000)),
        "unpad": (lambda: pp.unpad(x.view(4, 3000, 1), mask, capacity=12000)[:3],
                  lambda: None),
        "pad": (lambda: pp.pad(x[0].view(3000, 1), torch.arange(3000, device=device) * 2, 2, 3000), lambda: None),
        "offsets_from_lengths": (lambda: pp.offsets_from_lengths(lengths), lambda: ref.offsets_from_lengths(lengths.cpu())),
        "lengths_from_offsets": (lambda: pp.lengths_from_offsets(offsets), lambda: ref.lengths_from_offsets(offsets.cpu())),
        "flags_from_offsets": (lambda: pp.flags_from_offsets(offsets, 3000),
                               lambda: ref.flags_from_offsets(offsets.cpu(), 3000)),
        "segment_ids_from_offsets": (lambda: pp.segment_ids_from_offsets(offsets, 3000),
                                     lambda: ref.segment_ids_from_offsets(offsets.cpu(), 3000)),
        "offsets_from_flags": (lambda: pp.offsets_from_flags(flags, capacity=3000), lambda: None),
    }
    for name, (call, reference) in calls.items():
        eager = call()
        captured = capture_cuda_graph(call)
        eager = eager if isinstance(eager, tuple) else (eager,)
        captured = captured if isinstance(captured, tuple) else (captured,)
        for e, c in zip(eager, captured):
            assert torch.equal(e, c), name
        want = reference()
        if want is not None:
            want = want if isinstance(want, tuple) else (want,)
            for e, w in zip(eager, want):
                assert torch.equal(e.cpu(), torch.as_tensor(w)), name


# ---- segmented_compact ---------------------------------------------------------------------


@pytest.mark.parametrize("lengths", ([5, 0, 3, 9], [0], [0, 0], [1] * 40, [2049, 1, 0, 4000], "random"))
@pytest.mark.parametrize("odtype", (torch.int32, torch.int64))
@pytest.mark.parametrize("capacity", (None, "less", "more"))
def test_segmented_compact_matches_loop(lengths, odtype, capacity, device):
    if lengths == "random":
        lengths = random_lengths(30, 20)
    offsets = make_offsets(lengths, odtype, device)
    total = sum(lengths)
    x = torch.randn(total, 2, device=device)
    mask = torch.rand(total, device=device) > 0.5
    count = int(mask.sum())
    cap = {None: None, "less": count // 2, "more": count + 3}[capacity]
    values, new_offsets = pp.segmented_compact(x, mask, offsets, cap, fill_value=-2.0)
    want_values, want_offsets = ref.segmented_compact(x.cpu(), mask.cpu(), offsets.cpu(), cap, -2.0)
    assert new_offsets.dtype == odtype
    assert torch.equal(values.cpu(), want_values) and torch.equal(new_offsets.cpu(), want_offsets)
    pp.check_offsets(new_offsets, values.shape[0] if cap is None else int(new_offsets[-1]))


def test_segmented_compact_gradcheck_and_strided_offsets(device):
    offsets = torch.tensor([0, 9, 3, 9, 3, 9, 7, 9], device=device)[::2]  # [0, 3, 3, 7], a strided view
    x = torch.randn(7, 2, dtype=torch.float64, device=device, requires_grad=True)
    mask = torch.tensor([1, 0, 1, 1, 1, 0, 1], dtype=torch.bool, device=device)
    values, new_offsets = pp.segmented_compact(x, mask, offsets)
    assert new_offsets.tolist() == [0, 2, 2, 5]
    torch.autograd.gradcheck(lambda t: pp.segmented_compact(t, mask, offsets)[0], (x,))
    torch.autograd.gradcheck(lambda t: pp.segmented_compact(t, mask, offsets, 3)[0], (x,))


def test_segmented_compact_compile(device):
    torch._dynamo.reset()
    x = torch.randn(12, 3, device=device, requires_grad=True)
    mask = torch.rand(12, device=device) > 0.4
    offsets = torch.tensor([0, 5, 5, 12], device=device, dtype=torch.int32)

    def f(t, m, o):
        values, new_offsets = pp.segmented_compact(t, m, o, capacity=10)
        return values.exp(), new_offsets

    got, want = torch.compile(f, fullgraph=True)(x, mask, offsets), f(x, mask, offsets)
    torch.testing.assert_close(got[0], want[0])
    assert torch.equal(got[1], want[1])
    (g,) = torch.autograd.grad(got[0].sum(), x)
    (want_g,) = torch.autograd.grad(want[0].sum(), x)
    torch.testing.assert_close(g, want_g)


# ---- unpad / pad ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ((3, 7, 4), (2, 5), (1, 0, 3), (0, 4, 2), (4, 33, 2, 3)))
@pytest.mark.parametrize("mask_dtype", (torch.bool, torch.int32, torch.int64))
def test_unpad_pad_match_flash_attn(shape, mask_dtype, device):
    x = torch.randn(shape, device=device)
    batch, seqlen = shape[:2]
    lengths = torch.randint(0, seqlen + 1, (batch,), device=device)
    am = (torch.arange(seqlen, device=device) < lengths[:, None]).to(mask_dtype)
    packed, indices, cu_seqlens, max_seqlen = pp.unpad(x, am)
    want = ref.unpad(x.cpu(), am.cpu())
    assert torch.equal(packed.cpu(), want[0]) and torch.equal(indices.cpu(), want[1])
    assert cu_seqlens.dtype == torch.int32 and torch.equal(cu_seqlens.cpu(), want[2])
    assert isinstance(max_seqlen, int) and max_seqlen == want[3]
    padded = pp.pad(packed, indices, batch, seqlen)
    assert torch.equal(padded.cpu(), ref.pad(want[0], want[1], batch, seqlen))
    # The capacity form: the same rows, then padding; max_seqlen on the device.
    capacity = x[..., 0].numel() if x.dim() > 2 else x.numel()
    packed_c, indices_c, cu_c, max_c = pp.unpad(x, am, capacity=capacity)
    tokens = packed.shape[0]
    assert torch.equal(packed_c[:tokens], packed) and not packed_c[tokens:].any()
    assert torch.equal(indices_c[:tokens], indices) and (indices_c[tokens:] == -1).all()
    assert torch.equal(cu_c, cu_seqlens) and isinstance(max_c, torch.Tensor) and int(max_c) == max_seqlen
    assert torch.equal(pp.pad(packed_c, indices_c, batch, seqlen), padded)


def test_unpad_non_contiguous_mask_holes(device):
    """Masks need not be left-aligned: every true position is a token, in order."""
    x = torch.randn(2, 6, 3, device=device)
    am = torch.tensor([[0, 1, 1, 0, 1, 0], [1, 0, 0, 0, 0, 1]], dtype=torch.bool, device=device)
    packed, indices, cu_seqlens, max_seqlen = pp.unpad(x, am)
    assert indices.tolist() == [1, 2, 4, 6, 11] and cu_seqlens.tolist() == [0, 3, 5] and max_seqlen == 3
    assert torch.equal(packed, x.reshape(12, 3)[indices])


def test_unpad_pad_gradients(device):
    x = torch.randn(3, 5, 2, dtype=torch.float64, device=device, requires_grad=True)
    am = torch.rand(3, 5, device=device) > 0.4
    torch.autograd.gradcheck(lambda t: pp.unpad(t, am)[0], (x,))
    torch.autograd.gradcheck(lambda t: pp.unpad(t, am, capacity=4)[0], (x,))
    packed = torch.randn(int(am.sum()), 2, dtype=torch.float64, device=device, requires_grad=True)
    indices = am.reshape(-1).nonzero().flatten()
    torch.autograd.gradcheck(lambda t: pp.pad(t, indices, 3, 5), (packed,))
    # Rows whose index is out of the grid (a capacity form's -1) are dropped, and get no gradient.
    with_tail = torch.cat([indices, indices.new_tensor([-1, 15])])
    extra = torch.randn(packed.shape[0] + 2, 2, dtype=torch.float64, device=device, requires_grad=True)
    torch.autograd.gradcheck(lambda t: pp.pad(t, with_tail, 3, 5), (extra,))
    out = pp.pad(extra, with_tail, 3, 5)
    assert torch.equal(out, pp.pad(extra[:-2], indices, 3, 5))


def test_unpad_pad_compile(device):
    torch._dynamo.reset()
    x = torch.randn(3, 8, 4, device=device, requires_grad=True)
    am = torch.rand(3, 8, device=device) > 0.3

    def f(t, m):
        packed, indices, cu_seqlens, max_seqlen = pp.unpad(t, m, capacity=24)
        return pp.pad(packed * 3, indices, 3, 8), cu_seqlens, max_seqlen

    got, want = torch.compile(f, fullgraph=True)(x, am), f(x, am)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    (gx,) = torch.autograd.grad(got[0].sum(), x)
    assert torch.equal(gx, 3 * am[..., None].expand_as(x).to(x.dtype))


# ---- offsets helpers -------------------------------------------------------------------------


@pytest.mark.parametrize("lengths", ([], [0], [3], [2, 0, 3, 0], [1] * 50, "random"))
@pytest.mark.parametrize("dtype", (torch.int32, torch.int64))
def test_offsets_helpers_round_trip(lengths, dtype, device):
    if lengths == "random":
        lengths = random_lengths(40, 30)
    lengths_t = torch.tensor(lengths, dtype=dtype, device=device)
    offsets = pp.offsets_from_lengths(lengths_t)
    assert offsets.dtype == dtype and torch.equal(offsets.cpu(), ref.offsets_from_lengths(lengths_t.cpu()))
    other = torch.int64 if dtype == torch.int32 else torch.int32
    assert pp.offsets_from_lengths(lengths_t, other).dtype == other
    assert torch.equal(pp.lengths_from_offsets(offsets), lengths_t)
    total = sum(lengths)
    flags = pp.flags_from_offsets(offsets, total)
    assert flags.dtype == torch.bool and torch.equal(flags.cpu(), ref.flags_from_offsets(offsets.cpu(), total))
    ids = pp.segment_ids_from_offsets(offsets, total)
    assert ids.dtype == torch.int32 and torch.equal(ids.cpu(), ref.segment_ids_from_offsets(offsets.cpu(), total))
    # Flags lose empty sequences: back to offsets, the non-empty ones remain.
    back = pp.offsets_from_flags(flags)
    nonempty = make_offsets([n for n in lengths if n > 0] or ([0] if total == 0 else []), device=device)
    if total == 0:
        assert back.tolist() == [0]
    else:
        assert torch.equal(back, nonempty)
    assert torch.equal(back.cpu(), ref.offsets_from_flags(flags.cpu()))


def test_offsets_from_flags_forms(device):
    flags = torch.tensor([False, False, True, True, False, True, False], device=device)  # 0 starts anyway
    assert pp.offsets_from_flags(flags).tolist() == [0, 2, 3, 5, 7]
    assert pp.offsets_from_flags(flags, dtype=torch.int32).dtype == torch.int32
    assert pp.offsets_from_flags(flags, capacity=6).tolist() == [0, 2, 3, 5, 7, 7, 7]
    assert pp.offsets_from_flags(flags, capacity=2).tolist() == [0, 2, 7]  # the last kept runs to the end
    assert pp.offsets_from_flags(flags, capacity=0).tolist() == [7]
    empty = torch.zeros(0, dtype=torch.bool, device=device)
    assert pp.offsets_from_flags(empty).tolist() == [0]
    assert pp.offsets_from_flags(empty, capacity=2).tolist() == [0, 0, 0]


def test_offsets_helpers_strided_offsets(device):
    offsets = torch.tensor([0, -5, 2, -5, 2, -5, 5], device=device, dtype=torch.int32)[::2]
    assert not offsets.is_contiguous()
    assert pp.lengths_from_offsets(offsets).tolist() == [2, 0, 3]
    assert pp.segment_ids_from_offsets(offsets, 5).tolist() == [0, 0, 2, 2, 2]
    assert pp.flags_from_offsets(offsets, 5).tolist() == [True, False, True, False, False]


def test_invalid_offsets_stay_in_bounds_on_cuda(device):
    """With checks off, CUDA does not validate offsets: garbage in, garbage out, but every access
    stays in bounds (compute-sanitizer checks this run)."""
    if not device.startswith("cuda"):
        pytest.skip("the CPU always validates offsets")
    bad = torch.tensor([3, -7, 100, 2], device=device)
    x = torch.randn(10, 2, device=device)
    mask = torch.rand(10, device=device) > 0.5
    pp.flags_from_offsets(bad, 10)
    pp.segment_ids_from_offsets(bad, 10)
    pp.lengths_from_offsets(bad)
    pp.segmented_compact(x, mask, bad, 10)
    pp.pad(x, torch.tensor([-3, 50, 1, 2, 3, 4, 5, 6, 7, 8], device=device), 2, 3)
    torch.cuda.synchronize()


def test_runs_under_deterministic_algorithms(device):
    """Every op of the family, forward and backward, under torch.use_deterministic_algorithms:
    none raises for a nondeterministic step, and repeated runs agree bitwise."""
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        x = torch.randn(3000, 4, device=device, requires_grad=True)
        mask = torch.rand(3000, device=device) > 0.5
        offsets = make_offsets([1000, 0, 2000], device=device)

        def run():
            values, count = pp.compact(x, mask, capacity=2000)
            (g,) = torch.autograd.grad((values * values).sum(), x)
            packed, indices, _, _ = pp.unpad(x.view(3, 1000, 4), mask.view(3, 1000))
            return (values, count, g, pp.pad(packed, indices, 3, 1000), pp.segmented_compact(x, mask, offsets)[1],
                    pp.flags_from_offsets(offsets, 3000), pp.segment_ids_from_offsets(offsets, 3000))

        first = run()
        for a, b in zip(run(), first):
            assert torch.equal(a, b)
    finally:
        torch.use_deterministic_algorithms(was)
