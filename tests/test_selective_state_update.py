"""selective_state_update: one decode step, state updated in place; against the float64
reference, in every layout, and T steps against the selective scan over those T steps."""
import itertools
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

import torch_parprims as pp
from torch_parprims import reference as ref

from helpers import assert_close

_ops = torch.ops.parprims

# Allowed error relative to a per-element magnitude (the same update on absolute values).
RTOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 1e-2, torch.bfloat16: 1e-2}
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)

# Layouts of B and C: without heads (batch, N) or grouped (batch, G, N); with heads (batch, G, N).
FORMS = ("plain", "plain_grouped", "heads", "heads_grouped")


@dataclass
class Inputs:
    state: torch.Tensor
    x: torch.Tensor
    dt: torch.Tensor
    A: torch.Tensor
    B: torch.Tensor
    C: torch.Tensor
    D: object = None
    z: object = None
    dt_bias: object = None
    dt_softplus: bool = False

    def args(self):
        return (self.state, self.x, self.dt, self.A, self.B, self.C, self.D, self.z, self.dt_bias, self.dt_softplus)


def make(form="plain", dtype=torch.float32, N=16, D=True, z=True, dt_bias=True, softplus=True, bc_dtype=None,
         device="cpu", batch=2, dim=6, H=4, P=3):
    """Random inputs; dt + dt_bias >= 0 so that the magnitude (the update on |inputs|) bounds
    every partial sum."""
    cdt = torch.float64 if dtype == torch.float64 else torch.float32
    heads = form.startswith("heads")
    groups = {"plain": None, "plain_grouped": 3, "heads": 1, "heads_grouped": 2}[form]
    chans = (H, P) if heads else (dim,)
    rows = (batch,) + chans

    def rnd(*shape, dt=dtype):
        return torch.randn(shape, dtype=torch.float64).to(dt).to(device)

    bcs = (batch, N) if groups is None else (batch, groups, N)
    bc_dtype = bc_dtype or dtype
    return Inputs(
        state=rnd(*rows, N, dt=cdt),
        x=rnd(*rows),
        dt=(torch.rand(rows, dtype=torch.float64) * (1.0 if softplus else 0.5)).to(dtype).to(device),
        A=(-torch.rand(chans + (N,), dtype=torch.float64) * 2).to(cdt).to(device),
        B=rnd(*bcs, dt=bc_dtype),
        C=rnd(*bcs, dt=bc_dtype),
        D=rnd(*chans, dt=cdt) if D else None,
        z=rnd(*rows) if z else None,
        dt_bias=(torch.rand(chans, dtype=torch.float64) * 0.2).to(cdt).to(device) if dt_bias else None,
        dt_softplus=softplus,
    )


def magnitudes(i: Inputs):
    """(out, new state) of the update on absolute values, float64: bounds on what is summed."""
    ab = lambda t: None if t is None else t.abs()  # noqa: E731
    out, new = ref.selective_state_update(ab(i.state), ab(i.x), i.dt, i.A, ab(i.B), ab(i.C), ab(i.D), None,
                                          i.dt_bias, i.dt_softplus)
    if i.z is not None:
        out = out * F.silu(i.z.to(torch.float64)).abs()
    return out, new


def check_step(i: Inputs, dtype):
    """Runs the op on `i` (state updated in place) and compares with the reference."""
    state0 = i.state.clone()
    exp_out, exp_state = ref.selective_state_update(*i.args())
    mag_out, mag_state = magnitudes(i)
    out = pp.selective_state_update(*i.args())
    assert out.dtype == i.x.dtype and out.shape == i.x.shape and out.device == i.x.device
    assert i.state.dtype == state0.dtype
    assert_close(out, exp_out, scale=mag_out, dtype=dtype, rtol=RTOL[dtype], what="out")
    state_rtol = RTOL[torch.float64 if dtype == torch.float64 else torch.float32]
    assert_close(i.state, exp_state, scale=mag_state, rtol=state_rtol, what="state")


# ---- against the reference -----------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("D,z,dt_bias,softplus", list(itertools.product((False, True), repeat=4)),
                         ids=lambda v: "TF"[not v])
@pytest.mark.parametrize("form", FORMS)
def test_matches_reference(form, D, z, dt_bias, softplus, dtype, device):
    i = make(form, dtype, 16, D, z, dt_bias, softplus, device=device)
    check_step(i, dtype)


@pytest.mark.parametrize("N", (1, 16, 300))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("form", FORMS)
def test_dstate(form, dtype, N, device):
    check_step(make(form, dtype, N, device=device), dtype)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16, torch.float64), ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("which", ("both", "B", "C"))
@pytest.mark.parametrize("form", ("plain", "heads_grouped"))
def test_float32_B_C(form, which, dtype, device):
    """B and/or C in float32 with inputs of another dtype."""
    i = make(form, dtype, 16, device=device)
    if which in ("both", "B"):
        i.B = i.B.float()
    if which in ("both", "C"):
        i.C = i.C.float()
    check_step(i, dtype)


def test_many_rows(device):
    """More rows than one launch's blocks cover (the grid-stride loop on CUDA)."""
    i = make("heads_grouped", torch.float32, 16, device=device, batch=3, H=64, P=64)
    check_step(i, torch.float32)
    i = make("plain", torch.float32, 4, device=device, batch=5, dim=20000)
    check_step(i, torch.float32)


def test_empty(device):
    i = make("heads", torch.float32, 8, device=device, batch=0)
    out = pp.selective_state_update(*i.args())
    assert out.shape == (0, 4, 3)


# ---- layouts: every tensor strided, state updated in place through its view -----------------


def poisoned_view(t: torch.Tensor, how: str) -> torch.Tensor:
    """`t`'s values in a non-contiguous view; the buffer around it is NaN."""
    if how == "transpose":  # the last two dimensions swapped in memory
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if how == "step":  # every other element of the first dimension that is > 1
        d = next((k for k in range(t.dim()) if t.size(k) > 1), 0)
        shape = list(t.shape)
        shape[d] *= 2
        buf = torch.full(shape, float("nan"), dtype=t.dtype, device=t.device)
        view = buf.narrow(d, 0, t.size(d) * 2)[(slice(None),) * d + (slice(0, None, 2),)]
        view.copy_(t)
        return view
    if how == "slice":  # a slice of a wider last dimension (the rest NaN), offset into its buffer
        shape = list(t.shape)
        shape[-1] += 3
        buf = torch.full(shape, float("nan"), dtype=t.dtype, device=t.device)
        view = buf[..., 2:2 + t.size(-1)]
        view.copy_(t)
        return view
    raise ValueError(how)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("how", ("transpose", "step", "slice"))
@pytest.mark.parametrize("form", FORMS)
def test_strided_inputs_and_state(form, how, dtype, device):
    i = make(form, dtype, 16, device=device)
    for name in ("state", "x", "dt", "A", "B", "C", "D", "z", "dt_bias"):
        t = getattr(i, name)
        if t.dim() >= 2 or how != "transpose":
            setattr(i, name, poisoned_view(t, how))
    assert not i.state.is_contiguous()
    base = i.state._base
    untouched = base.isnan().clone() if base is not None else None
    check_step(i, dtype)
    if base is not None:  # only the view's elements were written
        assert torch.equal(base.isnan(), untouched)


def test_state_transposed_view_in_place(device):
    """A (batch, N, dim) buffer seen as the (batch, dim, N) state: updated in place."""
    i = make("plain", torch.float32, 16, device=device)
    buf = i.state.transpose(1, 2).contiguous()
    i.state = buf.transpose(1, 2)
    _, expected = ref.selective_state_update(*i.args())
    pp.selective_state_update(*i.args())
    assert_close(buf.transpose(1, 2), expected, rtol=1e-5, scale=magnitudes(i)[1], what="state")


def test_broadcast_inputs(device):
    """Stride-0 (expanded) inputs are read as they are."""
    i = make("heads_grouped", torch.float32, 16, device=device)
    i.B = i.B[:1].expand_as(i.B)
    i.A = i.A[:, :1].expand_as(i.A)
    i.x = i.x[:, :, :1].expand_as(i.x)
    check_step(i, torch.float32)


# ---- T decode steps = the selective scan over those T steps ---------------------------------


def _has_kernel(op: str, device: str) -> bool:
    key = "CUDA" if device.startswith("cuda") else "CPU"
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, key)


@pytest.mark.parametrize("softplus", (False, True))
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=lambda d: str(d)[6:])
def test_decode_steps_equal_selective_scan(dtype, softplus, device):
    if not _has_kernel("parprims::_selective_scan_forward", device):
        pytest.skip(f"selective_scan has no kernel on {device}")
    batch, dim, N, T = 2, 5, 16, 7
    f64 = torch.float64
    u = torch.randn(batch, dim, T, dtype=f64).to(dtype).to(device)
    delta = (torch.rand(batch, dim, T, dtype=f64) * 0.5).to(dtype).to(device)
    z = torch.randn(batch, dim, T, dtype=f64).to(dtype).to(device)
    B = torch.randn(batch, N, T, dtype=f64).to(dtype).to(device)
    C = torch.randn(batch, N, T, dtype=f64).to(dtype).to(device)
    A = -torch.rand(dim, N, device=device) * 2
    D = torch.randn(dim, device=device)
    bias = torch.rand(dim, device=device) * 0.2
    state0 = torch.randn(batch, dim, N, device=device)

    scan_out, scan_last = pp.selective_scan(u, delta, A, B, C, D, z, bias, softplus, initial_state=state0)

    state = state0.clone()
    mag_state = state0.abs().double()
    outs, mags = [], []
    for t in range(T):
        step = Inputs(state, u[..., t], delta[..., t], A, B[..., t], C[..., t], D, z[..., t], bias, softplus)
        mag_step = Inputs(mag_state, *step.args()[1:])
        mag_out, mag_state = magnitudes(mag_step)
        outs.append(pp.selective_state_update(*step.args()))
        mags.append(mag_out)
    assert state.dtype == torch.float32
    out = torch.stack(outs, -1)
    assert out.dtype == dtype
    # Both compute in float32; half outputs are each rounded once.
    assert_close(out, scan_out, scale=torch.stack(mags, -1), dtype=dtype, rtol=RTOL[dtype], what="out")
    assert_close(state, scan_last, scale=mag_state, rtol=1e-5, what="state")


# ---- opcheck --------------------------------------------------------------------------------

OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


@pytest.mark.parametrize("form,dtype", [("plain", torch.float32), ("heads_grouped", torch.bfloat16),
                                        ("plain_grouped", torch.float64)], ids=str)
def test_opcheck(form, dtype, device):
    i = make(form, dtype, 16, device=device)
    torch.library.opcheck(_ops.selective_state_update.default, i.args(), test_utils=OPCHECK_UTILS)


def test_mutates_only_state(device):
    """The schema declares `Tensor(a!) state`: opcheck's test_schema checks that the op writes
    state and nothing else on its own copies; here, a direct call on ours."""
    i = make("heads", torch.float32, 16, device=device)
    torch.library.opcheck(_ops.selective_state_update.default, i.args(), test_utils=("test_schema",))
    before = {k: v.clone() for k, v in vars(i).items() if isinstance(v, torch.Tensor)}
    _ops.selective_state_update(*i.args())
    for k, v in before.items():
        assert torch.equal(getattr(i, k), v) == (k != "state"), k


# ---- bad arguments --------------------------------------------------------------------------


def _raises(pattern):
    return pytest.raises(RuntimeError, match=pattern)


BAD = [
    # (form, what to change, pattern)
    ("plain", lambda i: setattr(i, "state", i.state[0]), r"^state: expected shape \(batch, dim, N\) or"),
    ("plain", lambda i: setattr(i, "state", i.state[..., :0]), r"^state: expected N"),
    ("plain", lambda i: setattr(i, "state", i.state.double()), r"^state: expected torch\.float32 \(the state of "
     r"torch\.float32 inputs\), got torch\.float64"),
    ("plain", lambda i: setattr(i, "state", i.state[:, :1].expand(-1, 6, -1)), r"^state: updated in place"),
    ("plain", lambda i: setattr(i, "x", i.x[:, :5]), r"^x: expected shape \(batch, dim\) = \[2, 6\]"),
    ("heads", lambda i: setattr(i, "x", i.x[:, :, :2]), r"^x: expected shape \(batch, H, P\) = \[2, 4, 3\]"),
    ("plain", lambda i: setattr(i, "x", i.x.long()), r"^x: expected torch\.float32, torch\.float16, "
     r"torch\.bfloat16 or torch\.float64, got torch\.int64"),
    ("plain", lambda i: setattr(i, "dt", i.dt.double()), r"^dt: expected x's dtype torch\.float32, got "
     r"torch\.float64"),
    ("plain", lambda i: setattr(i, "dt", i.dt[:1]), r"^dt: expected shape"),
    ("heads", lambda i: setattr(i, "z", i.z.half()), r"^z: expected x's dtype torch\.float32, got torch\.float16"),
    ("heads", lambda i: setattr(i, "z", i.z[:, :2]), r"^z: expected shape \(batch, H, P\)"),
    ("plain", lambda i: setattr(i, "A", i.A[:, :3]), r"^A: expected shape \(dim, N\) = \[6, 16\]"),
    ("heads", lambda i: setattr(i, "A", i.A[0]), r"^A: expected shape \(H, P, N\) = \[4, 3, 16\]"),
    ("plain", lambda i: setattr(i, "A", i.A.half()), r"^A: expected torch\.float32, got torch\.float16"),
    ("plain", lambda i: setattr(i, "B", i.B[:, :3]), r"^B: expected shape \(batch, N\) with batch = 2 and N = 16"),
    ("plain", lambda i: setattr(i, "C", i.C[0]), r"^C: expected shape \(batch, N\) or \(batch, G, N\), got 1"),
    ("heads", lambda i: setattr(i, "B", i.B[:, 0]), r"^B: expected shape \(batch, G, N\), got 2"),
    ("heads", lambda i: setattr(i, "C", i.C.expand(-1, 3, -1)), r"^C: expected a number of groups G that "
     r"divides H = 4, got G = 3"),
    ("heads_grouped", lambda i: setattr(i, "C", i.C[:, :1]), r"^B, C: expected the same number of groups"),
    ("plain", lambda i: setattr(i, "B", i.B.half()), r"^B: expected torch\.float32 \(x's dtype\), got torch\.float16"),
    ("heads", lambda i: setattr(i, "D", i.D[0]), r"^D: expected shape \(H, P\) = \[4, 3\]"),
    ("plain", lambda i: setattr(i, "D", i.D.double()), r"^D: expected torch\.float32, got torch\.float64"),
    ("plain", lambda i: setattr(i, "dt_bias", i.dt_bias[:2]), r"^dt_bias: expected shape \(dim,\) = \[6\]"),
]


@pytest.mark.parametrize("k", range(len(BAD)))
def test_bad_arguments(k, device):
    form, change, pattern = BAD[k]
    i = make(form, torch.float32, 16, device=device)
    change(i)
    with _raises(pattern):
        pp.selective_state_update(*i.args())


def test_bad_half_state_and_b(device):
    i = make("plain", torch.bfloat16, 16, device=device)
    i.B = i.B.half()
    with _raises(r"^B: expected x's dtype torch\.bfloat16 or torch\.float32, got torch\.float16"):
        pp.selective_state_update(*i.args())
    i = make("plain", torch.bfloat16, 16, device=device)
    i.state = i.state.bfloat16()
    with _raises(r"^state: expected torch\.float32 \(the state of torch\.bfloat16 inputs\)"):
        pp.selective_state_update(*i.args())


@pytest.mark.parametrize("name", ("x", "dt", "A", "B", "C", "D", "z", "dt_bias"))
def test_bad_device(name, device):
    if device.startswith("cuda"):
        other = "cpu"
    elif torch.cuda.is_available():
        other = "cuda"
    else:
        pytest.skip("a device mismatch needs a second device (CUDA)")
    i = make("heads", torch.float32, 16, device=device)
    setattr(i, name, getattr(i, name).to(other))
    with _raises(rf"^{name}: expected a tensor on {device}.* \(state's device\), got {other}"):
        pp.selective_state_update(*i.args())
