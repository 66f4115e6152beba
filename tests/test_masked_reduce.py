"""reduce over a dimension, with an optional mask: comparison with the float64 reference and
torch's reductions, masked mean pooling, gradients (gradcheck, first-of-ties among the unmasked
elements), opcheck and torch.compile; rows long enough for several tiles of the CUDA rows pass."""
from dataclasses import dataclass

import pytest
import torch

import torch_parprims as pp
from torch_parprims import reference as ref

from helpers import OPCHECK_UTILS, assert_close, draw, sample_params, with_layout
from reduce_common import DRAW_OP, FINITE, INT_OPS, OPS, reduction_scale

_ops = torch.ops.parprims


@pytest.mark.parametrize("op", ("sum", "max"))
def test_reduce_long_rows_of_several_tiles(op, device):
    """Rows long enough for many tiles of the CUDA rows pass (4096 positions each) per row, the
    last of them partial (2^18 + 100 positions)."""
    x = torch.randn(48, (1 << 18) + 100, device=device)
    got = pp.reduce(x, -1, op)
    wide = x.cpu().double()
    want = wide.sum(-1) if op == "sum" else wide.amax(-1)
    assert_close(got, want, scale=x.cpu().double().abs().sum(-1) if op == "sum" else None)


@pytest.mark.parametrize("op", ("sum", "mean", "max"))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float64))
@pytest.mark.parametrize("masked", (False, True))
def test_reduce_over_many_pieces_of_strided_rows(op, dtype, masked, device):
    """Rows along a strided dim, (T, F) reduced over T, long enough that the CUDA columns pass
    cuts each into hundreds of pieces: the row's one segment crosses them all, and is folded by a
    whole warp (more than 32 pieces); (T, 4) for rows four a word, (T, 3) one a thread. The same
    bits on every call, whichever piece finishes last."""
    for features in (4, 3):
        x = draw((5000, features), DRAW_OP[op], dtype, "normal", device)
        mask = torch.rand(5000, 1, device=device) > 0.3 if masked else None
        got = pp.reduce(x, 0, op, mask=mask)
        expected = ref.reduce(x.cpu(), 0, op, None if mask is None else mask.cpu())
        scale = ref.reduce(x.cpu().double().abs(), 0, "sum") if op != "max" else None
        assert_close(got, expected, scale=scale)
        for _ in range(3):
            assert torch.equal(got, pp.reduce(x, 0, op, mask=mask))


# ---- reduce (with masks) ------------------------------------------------------------------


@dataclass(frozen=True)
class ReduceSample:
    shape: tuple = (5, 37)
    dim: int = 1
    op: str = "sum"
    dtype: torch.dtype = torch.float32
    mask: str = "none"  # none | random | broadcast (trailing size-1 dim) | rows (some slices all out)
    keepdim: bool = False
    values: str = "normal"
    view: str = "contiguous"
    slow: bool = False
    check: bool = False
    compile: bool = False

    def __str__(self):
        shape = "x".join(map(str, self.shape)) or "scalar"
        dtype = str(self.dtype).replace("torch.", "")
        keep = "-keepdim" if self.keepdim else ""
        return f"{shape}-dim{self.dim}-{self.op}-{dtype}-mask_{self.mask}-{self.values}-{self.view}{keep}"

    def make(self, device):
        x = with_layout(draw(self.shape, DRAW_OP[self.op], self.dtype, self.values, device), self.view, self.dim)
        if self.mask == "none":
            return x, None
        if self.mask == "broadcast":
            mask = torch.rand(self.shape[:-1] + (1,), device=device) > 0.3
        else:
            mask = torch.rand(self.shape, device=device) > 0.3
        if self.mask == "rows" and x.dim() > 0:
            index = [slice(None)] * x.dim()
            index[(self.dim + 1) % x.dim()] = 0
            mask[tuple(index)] = False  # the slices through index 0 of another dim: all masked out
        return x, mask


def _reduce_samples():
    S = ReduceSample
    out = []
    for op in OPS:
        out.append(S(op=op, check=op in ("mean", "max")))
        out.append(S(op=op, mask="random", check=op in ("sum", "prod"), compile=op in ("mean", "prod")))
        out.append(S(op=op, mask="rows", shape=(4, 6, 9), dim=1, dtype=torch.float64))
        out.append(S(op=op, mask="broadcast", shape=(3, 40, 8), dim=1, keepdim=True))
        # Pooling over the middle dim of a bfloat16 batch: 20 features a token are two groups of
        # 8 rows side by side (the CPU's vectorizable loop) and 4 rows alone.
        out.append(S(op=op, mask="broadcast", shape=(2, 33, 20), dim=1, dtype=torch.bfloat16))
        # The same in float16 (a mean's sums widened one element at a time), and with infinities
        # that the mask leaves out or keeps.
        out.append(S(op=op, mask="broadcast", shape=(2, 33, 16), dim=1, dtype=torch.float16, values="inf"))
        # Wider tokens in float32: 72 and 96 features, 9 and 12 groups of 8 rows side by side.
        out.append(S(op=op, mask="broadcast", shape=(2, 33, 72), dim=1))
        out.append(S(op=op, mask="broadcast", shape=(2, 21, 96), dim=1))
        # A mask per feature: features side by side that do not share their mask elements.
        out.append(S(op=op, mask="random", shape=(2, 33, 8), dim=1))
        out.append(S(op=op, shape=(2, 3, 70), dim=-1, view="step", values="nan"))
        out.append(S(op=op, shape=(70, 3), dim=0, view="transpose", values="inf", mask="random"))
        for dtype in (torch.float16, torch.bfloat16):
            out.append(S(op=op, dtype=dtype, mask="random"))
    for op in INT_OPS:
        for dtype in (torch.int32, torch.int64, torch.bool):
            out.append(S(op=op, dtype=dtype, mask="random", shape=(4, 21)))
    out.append(S(shape=(), dim=0, op="sum"))
    out.append(S(shape=(), dim=-1, op="max", mask="random", keepdim=True))
    out.append(S(shape=(3, 0, 2), dim=1, op="prod"))
    out.append(S(shape=(0, 5), dim=1, op="max"))
    out.append(S(shape=(2, 1 << 17), dim=1, op="sum", slow=True))
    out.append(S(shape=(1 << 17, 3), dim=0, op="max", mask="random", slow=True))
    return out


REDUCE_SAMPLES = _reduce_samples()


@pytest.mark.parametrize("s", sample_params(REDUCE_SAMPLES))
def test_reduce_matches_reference(s, device):
    x, mask = s.make(device)
    got = pp.reduce(x, s.dim, s.op, mask, keepdim=s.keepdim)
    expected = ref.reduce(x.cpu(), s.dim, s.op, None if mask is None else mask.cpu(), s.keepdim)
    scale = None
    if s.dtype.is_floating_point:
        xc = x.detach().cpu().double()
        m = torch.ones(x.shape, dtype=torch.bool) if mask is None else mask.cpu().expand(x.shape)
        counts = ref.reduce(m.long(), s.dim, "sum", None, s.keepdim)
        absx = torch.where(xc.isfinite(), xc.abs(), 0)
        scale = ref.reduce(absx, s.dim, s.op, m, s.keepdim) if s.op in ("sum", "mean") else \
            reduction_scale(None, expected, s.op, counts)
    assert_close(got, expected, scale=scale)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dim", (0, 1, -1))
def test_reduce_without_mask_matches_torch(op, dim, device):
    x = torch.randn(6, 7, 5, dtype=torch.float64, device=device)
    torch_op = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin, "prod": torch.prod,
                "logsumexp": torch.logsumexp}[op]
    for keepdim in (False, True):
        torch.testing.assert_close(pp.reduce(x, dim, op, keepdim=keepdim), torch_op(x, dim, keepdim=keepdim),
                                   rtol=1e-12, atol=1e-12)


def test_masked_mean_pooling(device):
    """The common use: mean over the valid tokens of a padded batch."""
    h = torch.randn(4, 9, 16, device=device)
    lengths = torch.tensor([9, 3, 0, 5], device=device)
    mask = torch.arange(9, device=device)[None, :] < lengths[:, None]
    got = pp.reduce(h, 1, "mean", mask[..., None])
    want = (h * mask[..., None]).sum(1) / lengths.clamp(min=1)[:, None]
    torch.testing.assert_close(got, want)
    assert torch.equal(got[2], torch.zeros(16, device=device))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("masked", (False, True))
def test_reduce_gradcheck(op, masked, device):
    x = draw((4, 7), DRAW_OP[op], torch.float64, "normal", device)
    if op in ("max", "min"):
        x = x + torch.arange(x.numel(), device=device).view(x.shape) * 1e-3
    if op == "prod":
        x[1, 2] = 0
        x[2, 0] = x[2, 5] = 0
    mask = (torch.rand(4, 7, device=device) > 0.3) if masked else None
    if masked:
        mask[3] = False  # an all-masked slice
    x.requires_grad_(True)
    out = pp.reduce(x.detach(), 1, op, mask)
    finite_out = out.isfinite()
    torch.autograd.gradcheck(lambda t: pp.reduce(t, 1, op, mask).masked_fill(~finite_out, 0), (x,))
    torch.autograd.gradcheck(lambda t: pp.reduce(t, 0, op, mask, keepdim=True).nan_to_num(0, 0, 0), (x,))


def test_reduce_ties_go_to_the_first_unmasked(device):
    x = torch.tensor([[4.0, 4.0, 1.0, 4.0]], device=device, requires_grad=True)
    mask = torch.tensor([[False, True, True, True]], device=device)
    pp.reduce(x, 1, "max", mask).sum().backward()
    assert x.grad.tolist() == [[0.0, 1.0, 0.0, 0.0]]


@pytest.mark.parametrize("s", sample_params([s for s in REDUCE_SAMPLES if s.values in FINITE], "check"))
def test_reduce_opcheck(s, device):
    x, mask = s.make(device)
    if s.dtype.is_floating_point:
        x.requires_grad_(True)
    torch.library.opcheck(_ops.reduce.default, (x, s.dim, s.op, mask, s.keepdim), test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("s", sample_params([s for s in REDUCE_SAMPLES if s.dtype.is_floating_point], "compile"))
def test_reduce_compile(s, device):
    torch._dynamo.reset()
    x, mask = s.make(device)
    x = x.detach().requires_grad_(True)

    def f(t, m):
        return pp.reduce(t.exp(), s.dim, s.op, m, keepdim=s.keepdim) * 3

    out, want = torch.compile(f, fullgraph=True)(x, mask), f(x, mask)
    torch.testing.assert_close(out, want, equal_nan=True)
    (g,) = torch.autograd.grad(out.nan_to_num(0).sum(), x)
    (want_g,) = torch.autograd.grad(want.nan_to_num(0).sum(), x)
    torch.testing.assert_close(g, want_g, equal_nan=True)
