"""selective_scan (Mamba-1) and selective_scan_fn, from one sample table.

Every sample is compared with ``reference.selective_scan`` (a float64 loop over time) for the
outputs and, through autograd on the reference, for the gradients of every floating input with a
random gradient of ``out`` and of ``last_state``.
"""
import inspect
import itertools
import math
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from typing import Optional

import pytest
import torch

import torch_parprims as pp
from torch_parprims import reference as ref

from helpers import assert_close, grad_weights, magnitude, make_offsets, rel_err, sample_params, tol

_ops = torch.ops.parprims

EVERY = _ops._selective_scan_checkpoint_every()  # the forward saves the state every EVERY steps
GROUPS = 2  # groups of the "group" form of B and C
NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")


@dataclass(frozen=True)
class SSSample:
    batch: int = 2
    dim: int = 4
    L: int = 33  # with `lengths`, the sum of the lengths
    N: int = 4
    bc: str = "var"  # B and C: const (dim, N) | var (batch, N, L) | group (batch, G, N, L)
    D: bool = False
    z: bool = False
    delta_bias: bool = False
    softplus: bool = False
    init: bool = False  # initial_state
    lengths: Optional[tuple] = None  # packed sequences along L (batch 1), with cu_seqlens
    offsets_dtype: torch.dtype = torch.int64
    dtype: torch.dtype = torch.float32
    view: str = "contiguous"  # contiguous | transposed: u, delta, z are views of (batch, L, dim)
    slow: bool = False
    gradcheck: bool = False
    opcheck: bool = False
    compile: bool = False

    def __post_init__(self):
        if self.lengths is not None:
            object.__setattr__(self, "batch", 1)
            object.__setattr__(self, "L", sum(self.lengths))

    def __str__(self):
        flags = "".join(c for c, on in (("D", self.D), ("z", self.z), ("b", self.delta_bias),
                                        ("s", self.softplus), ("h", self.init)) if on)
        packed = f"-seqs{len(self.lengths)}-{str(self.offsets_dtype)[6:]}" if self.lengths is not None else ""
        return (f"{self.batch}x{self.dim}x{self.L}xN{self.N}-{self.bc}-{flags or 'plain'}{packed}-"
                f"{str(self.dtype)[6:]}-{self.view}")

    @property
    def compute(self):
        return torch.float64 if self.dtype == torch.float64 else torch.float32

    @property
    def num_states(self):
        return len(self.lengths) if self.lengths is not None else self.batch

    def make(self, device):
        """The op's arguments as a dict (floating tensors are leaves)."""
        b, d, L, n, dt, cdt = self.batch, self.dim, self.L, self.N, self.dtype, self.compute
        f64 = torch.float64

        def seq(x):  # a (batch, dim, L) input, possibly a transposed view
            if self.view == "transposed":
                return x.transpose(1, 2).contiguous().to(dt).to(device).transpose(1, 2)
            return x.to(dt).to(device)

        def on(x, dtype):
            return x.to(dtype).to(device)

        args = {}
        args["u"] = seq(torch.randn(b, d, L, dtype=f64))
        if self.softplus:  # softplus(delta + bias) mostly in [0.02, 0.5]
            raw = torch.randn(b, d, L, dtype=f64) * 0.7 - 2.0
            bias = 0.5 * torch.randn(d, dtype=f64)
        else:  # delta positive, in [0.01, 0.3]
            raw = 0.01 + 0.25 * torch.rand(b, d, L, dtype=f64)
            bias = 0.05 * torch.rand(d, dtype=f64)
        args["delta"] = seq(raw)
        # A < 0 over two orders of magnitude: some channels remember hundreds of steps.
        args["A"] = on(-torch.exp(torch.empty(d, n, dtype=f64).uniform_(math.log(0.02), math.log(2.0))), cdt)
        if self.bc == "const":
            shape, pdt = (d, n), cdt
        elif self.bc == "var":
            shape, pdt = (b, n, L), dt
        else:
            shape, pdt = (b, GROUPS, n, L), dt
        args["B"] = on(torch.randn(shape, dtype=f64), pdt)
        args["C"] = on(torch.randn(shape, dtype=f64), pdt)
        args["D"] = on(torch.randn(d, dtype=f64), cdt) if self.D else None
        args["z"] = seq(torch.randn(b, d, L, dtype=f64)) if self.z else None
        args["delta_bias"] = on(bias, cdt) if self.delta_bias else None
        args["delta_softplus"] = self.softplus
        args["initial_state"] = on(torch.randn(self.num_states, d, n, dtype=f64), cdt) if self.init else None
        args["cu_seqlens"] = (make_offsets(self.lengths, self.offsets_dtype, device)
                              if self.lengths is not None else None)
        return args


def floats(args):
    """The floating inputs present, in NAMES order: (names, tensors)."""
    names = [k for k in NAMES if args[k] is not None]
    return names, [args[k] for k in names]


def leaf_floats(args):
    """floats(args), each made a leaf that requires grad."""
    names, inputs = floats(args)
    for x in inputs:
        x.requires_grad_()
    return names, inputs


def run(args):
    return pp.selective_scan(**args)


def run_ref(args):
    return ref.selective_scan(**args)


def scales(args):
    """Per-element magnitudes of out and last_state: the recurrence run on |u|, |B|, |C|, |D| and
    |initial_state| (the same gates), times |silu(z)|."""
    wide = {k: (v.detach().double().abs() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
            for k, v in args.items()}
    wide["delta"] = args["delta"].detach().double()
    wide["A"] = args["A"].detach().double()
    if args["delta_bias"] is not None:
        wide["delta_bias"] = args["delta_bias"].detach().double()
    wide["z"] = None
    out, last = ref.selective_scan(**wide)
    if args["z"] is not None:
        out = out * torch.nn.functional.silu(args["z"].detach().double()).abs()
    return out.cpu(), last.cpu()


def last_state_tol(s):
    # last_state is float32 for half inputs, computed in float32 from the same input values.
    return tol(s.compute)


# ---- the sample table ----------------------------------------------------------------------------


def _samples():
    S = SSSample
    out = []
    # Every combination of B/C form, D, z, delta_bias and softplus (small shapes); initial
    # states and transposed views on some; L crosses a checkpoint.
    for i, (bc, D, z, bias, sp) in enumerate(itertools.product(("const", "var", "group"), *[(False, True)] * 4)):
        out.append(S(2, 4, 2 * EVERY + 1 + i % 3, 3, bc, D, z, bias, sp, init=i % 3 == 1,
                     view="transposed" if i % 4 == 2 else "contiguous",
                     opcheck=i in (7, 40), gradcheck=i in (5, 30), compile=i == 47))
    # Lengths: one step, around the checkpoint spacing and its multiples, long rows.
    for L in (1, EVERY - 1, EVERY, EVERY + 1, 2 * EVERY - 1, 2 * EVERY, 2 * EVERY + 1, 4 * EVERY - 1,
              4 * EVERY, 4 * EVERY + 1, 127):
        out.append(S(2, 2, L, 4, "var" if L % 2 else "group", D=True, z=L % 3 == 0, delta_bias=True,
                     softplus=True, init=L % 2 == 1))
    for L in (2048, 2049, 4500):
        out.append(S(1, 2, L, 2, "var", D=True, z=True, delta_bias=True, softplus=True, init=L == 2049))
    # Time segments (CUDA, few rows: each row is cut into segments of 512 steps at L = 4096, on
    # any GPU that runs 8 blocks at once): sequences that end at segment ends, empty ones there,
    # a sequence across several segments, one of a single step.
    out.append(S(lengths=(512, 0, 0, 300, 212, 1024, 0, 511, 1, 1536, 0), bc="var", D=True, z=True,
                 delta_bias=True, softplus=True, init=True))
    out.append(S(2, 3, 4096, 4, "const", D=True, delta_bias=True, softplus=True, init=True))
    # The CUDA forward may cut packed rows at sequence starts (8 segments at L = 4096; run with
    # PARPRIMS_TIME_SEGMENT_CUTS=starts to force it): 960 twice (two cuts at one start: an empty
    # segment), 2048 (a start on a cut: its summary walks nothing), 1536, 2560 and 3072 (a
    # sequence across whole segments: cuts inside it), 4096 (a start 10 steps before the end: an
    # empty last segment), empty sequences at a cut and at the end. The Mamba instance (N = 16) too.
    for dim, n in ((4, 4), (20, 16)):
        out.append(S(lengths=(900, 0, 1148, 2038, 10, 0), bc="var", D=True, z=True, delta_bias=True, softplus=True,
                     init=True, dim=dim, N=n))
    # Empty rows keep the initial state (variable B/C: see test_empty_rows_backward_variable_B).
    out.append(S(1, 2, 0, 4, "const", D=True, z=True, init=True))
    # State sizes.
    for n in (1, 16, 64, 256, 300):
        out.append(S(1, 2, 40, n, "const" if n in (16, 300) else "var", D=True, z=n != 64, delta_bias=True,
                     softplus=True, init=n == 300))
    # N = 32: the CUDA forward's 16 threads a channel in the paired lane layout (two channels a
    # warp, lane bit 0 choosing between them), with a partial last block of channels.
    out.append(S(2, 9, 70, 32, "var", D=True, z=True, delta_bias=True, softplus=True, init=True))
    # Mamba's N = 16 with variable B and C: the CUDA kernels' instances for it take two time
    # steps an item where the inputs are time-contiguous, pair-aligned and of even length, and
    # one otherwise. Even and odd lengths, a partial last chunk, a partial block of
    # channels (dim 20, 18), 12 states of 16, half inputs, a transposed view, time segments
    # (L = 4096 on few rows) and packed sequences.
    for batch, dim, L, n, bc, dt, view in ((2, 20, 2 * EVERY + 2, 16, "var", torch.float32, "contiguous"),
                                           (2, 16, 50, 12, "group", torch.float32, "contiguous"),
                                           (2, 16, 4 * EVERY + 1, 16, "var", torch.float32, "contiguous"),
                                           (2, 18, 66, 16, "var", torch.bfloat16, "contiguous"),
                                           (2, 18, 66, 16, "group", torch.float16, "transposed"),
                                           (1, 3, 4096, 16, "var", torch.float32, "contiguous")):
        out.append(S(batch, dim, L, n, bc, D=True, z=True, delta_bias=True, softplus=True, init=True, dtype=dt,
                     view=view))
    out.append(S(lengths=(5, 0, 17, 0, 40, 2), bc="var", D=True, z=True, delta_bias=True, softplus=True, init=True,
                 dim=20, N=16))
    # Whole blocks of channels (32 at N = 16, 64 at N = 8 on CUDA): the backward writes its
    # partial sums of variable dB and dC over the checkpoints it has read. A partial last chunk,
    # groups, packed sequences.
    out.append(S(2, 32, 2 * EVERY + 8, 16, "var", D=True, z=True, delta_bias=True, softplus=True, init=True,
                 opcheck=True))
    out.append(S(1, 2 * 64, 3 * EVERY + 1, 8, "group", D=True, z=True, delta_bias=True, softplus=True))
    out.append(S(lengths=(EVERY + 3, 0, 2 * EVERY, 1), bc="var", D=True, z=True, delta_bias=True, softplus=True,
                 init=True, dim=64, N=16, opcheck=True))
    # dtypes: half inputs (float32 states and parameters), float64.
    for dt, bc in itertools.product((torch.bfloat16, torch.float16, torch.float64), ("const", "var", "group")):
        out.append(S(2, 4, 70, 8, bc, D=True, z=True, delta_bias=True, softplus=True, init=bc != "const",
                     dtype=dt, view="transposed" if bc == "var" else "contiguous",
                     opcheck=dt == torch.bfloat16 and bc == "group"))
    # More channels, and more batch rows, than one dimension of a CUDA grid holds (65535): the
    # kernels walk their blocks in a grid-stride loop.
    out.append(S(1, 70000, EVERY + 4, 4, "var", D=True, z=True, delta_bias=True, softplus=True, init=True))
    out.append(S(70000, 2, EVERY + 4, 2, "group", D=True, z=True, delta_bias=True, softplus=True))
    # float64 with many states: the CUDA backward walks them in tiles of 64 (shared memory).
    out.append(S(1, 3, 40, 100, "var", D=True, z=True, delta_bias=True, softplus=True, init=True,
                 dtype=torch.float64))
    # Packed sequences (batch 1) with empty ones, int32 and int64 offsets.
    out += [
        S(lengths=(5, 0, 17, 0, 40, 1, 0), bc="var", D=True, z=True, delta_bias=True, softplus=True, init=True,
          gradcheck=True, opcheck=True),
        S(lengths=(0, 0, 33, 16, 0), bc="group", D=True, softplus=True, offsets_dtype=torch.int32),
        S(lengths=(EVERY - 1, EVERY + 1, 1, 2 * EVERY), bc="const", z=True, delta_bias=True, init=True,
          offsets_dtype=torch.int32, view="transposed", compile=True),
        S(lengths=(0, 0, 0), bc="const", D=True, init=True),
        S(lengths=(0, 20), bc="var", D=True, z=True, init=True, dtype=torch.bfloat16),
        S(lengths=(30, 0), bc="group", D=True, z=True, init=True, dtype=torch.float64),
    ]
    # Bigger shapes (slow: the float64 reference loops over L, and its backward is quadratic in L).
    out += [
        S(1, 4, 4500, 8, "group", D=True, z=True, delta_bias=True, softplus=True, init=True, slow=True),
        S(1, 2, 1100, 256, "var", D=True, z=True, delta_bias=True, softplus=True, slow=True),
        S(2, 64, 300, 16, "const", D=True, z=True, delta_bias=True, softplus=True, slow=True),
        S(2, 8, 2049, 16, "var", D=True, z=True, delta_bias=True, softplus=True, dtype=torch.bfloat16, slow=True),
        S(2, 8, 2049, 16, "group", D=True, z=True, delta_bias=True, softplus=True, dtype=torch.float16,
          view="transposed", slow=True),
        S(lengths=(700, 0, 1500, 3, 2300), bc="var", D=True, z=True, delta_bias=True, softplus=True, init=True,
          dim=8, N=16, slow=True),
    ]
    return out


SAMPLES = _samples()


def _gradcheck_samples():
    return [replace(s, dtype=torch.float64, batch=min(s.batch, 2), dim=min(s.dim, 4), N=min(s.N, 3),
                    view="contiguous") for s in SAMPLES if s.gradcheck] + [
        SSSample(2, 4, EVERY + 3, 2, "const", D=True, z=True, delta_bias=True, softplus=True, init=True,
                 dtype=torch.float64, gradcheck=True),
        SSSample(2, 4, EVERY + 3, 2, "group", D=True, z=True, delta_bias=True, softplus=True, init=True,
                 dtype=torch.float64, gradcheck=True),
    ]


# ---- forward -------------------------------------------------------------------------------------


@pytest.mark.parametrize("s", sample_params(SAMPLES))
def test_selective_scan_matches_reference(s, device):
    args = s.make(device)
    out, last = run(args)
    rout, rlast = run_ref(args)
    sout, slast = scales(args)
    assert out.dtype == s.dtype and out.shape == (s.batch, s.dim, s.L)
    assert last.dtype == s.compute and last.shape == (s.num_states, s.dim, s.N)
    assert_close(out, rout, scale=sout, what="out")
    assert_close(last, rlast, scale=slast, rtol=last_state_tol(s), what="last_state")


# ---- backward ------------------------------------------------------------------------------------


def _grad_rtol(dtype):
    """Norm-wise tolerance of a gradient in ``dtype`` (parameter gradients sum many terms)."""
    return {torch.float64: 1e-10, torch.float32: 1e-4}.get(dtype, 1e-2)


def check_grads(grads, ref_grads, names, inputs, row_dims=(-1,)):
    """Gradients of u, delta and z per element, against the largest |gradient| over `row_dims`
    (the row); the others norm-wise."""
    for g, r, x, name in zip(grads, ref_grads, inputs, names):
        assert g is not None, f"no gradient for {name}"
        assert g.dtype == x.dtype and g.shape == x.shape, f"grad {name}: {g.dtype} {tuple(g.shape)}"
        if name in ("u", "delta", "z"):  # per element, against the largest |gradient| of the row
            row = r.detach().abs().amax(dim=row_dims, keepdim=True) if r.shape[-1] else r.abs()
            assert_close(g, r, scale=row, what=f"grad {name}")
        else:
            assert not g.isnan().any(), f"grad {name}: NaN"
            if r.numel() and r.abs().max() > 0:
                err = rel_err(g.cpu(), r.cpu())
                assert err < _grad_rtol(g.dtype), f"grad {name}: norm-wise relative error {err:.3g}"
            else:
                assert_close(g, r, scale=0, what=f"grad {name}")


def forward_on_leaves(args):
    """The op on ``args`` with every floating input made a leaf that requires grad, and random
    gradients for its outputs: (names, inputs, out, last, gout, glast)."""
    names, inputs = leaf_floats(args)
    out, last = run(args)
    return names, inputs, out, last, grad_weights(out), grad_weights(last)


def library_grads(args):
    """The op's gradients for every floating input of ``args`` (made leaves) under random
    gradients of out and last_state: (names, inputs, grads, gout, glast)."""
    names, inputs, out, last, gout, glast = forward_on_leaves(args)
    grads = torch.autograd.grad((out, last), inputs, (gout, glast), allow_unused=True)
    return names, inputs, grads, gout, glast


def reference_grads(args, names, gout, glast):
    """The float64 reference's gradients for the inputs ``names`` of ``args`` under the same
    incoming gradients (zeros for an input that does not reach the outputs)."""
    wide = dict(args)
    for k in names:
        wide[k] = args[k].detach().double().requires_grad_()
    rout, rlast = run_ref(wide)
    ref_grads = torch.autograd.grad((rout, rlast), [wide[k] for k in names], (gout.double(), glast.double()),
                                    allow_unused=True)
    return [torch.zeros_like(wide[k]) if r is None else r for k, r in zip(names, ref_grads)]


@pytest.mark.parametrize("s", sample_params(SAMPLES))
def test_selective_scan_backward_matches_reference(s, device):
    args = s.make(device)
    names, inputs, grads, gout, glast = library_grads(args)
    check_grads(grads, reference_grads(args, names, gout, glast), names, inputs)


@pytest.mark.parametrize("s", sample_params(_gradcheck_samples()))
def test_selective_scan_gradcheck(s, device):
    args = s.make(device)
    names, inputs = floats(args)

    def fn(*xs):
        return run({**args, **dict(zip(names, xs))})

    assert torch.autograd.gradcheck(fn, [x.detach().requires_grad_() for x in inputs])


@pytest.mark.parametrize("batch,dim", ((0, 3), (2, 0)))
def test_no_rows_or_no_channels(batch, dim, device):
    # Long enough that rows with channels would be cut into time segments on a GPU.
    s = SSSample(batch, dim, 2048, 4, "var", D=True, z=True, delta_bias=True, softplus=True, init=True)
    args = s.make(device)
    names, inputs = leaf_floats(args)
    out, last = run(args)
    assert out.shape == (batch, dim, 2048) and last.shape == (batch, dim, 4)
    grads = torch.autograd.grad((out, last), inputs, (torch.ones_like(out), torch.ones_like(last)),
                                allow_unused=True)
    for g, x, name in zip(grads, inputs, names):
        assert g is not None and g.shape == x.shape, name
        if name in ("A", "D", "delta_bias"):  # sums over no rows (or of no channels)
            assert (g == 0).all(), name


@pytest.mark.parametrize("packed", (False, True))
def test_gradient_through_last_state_only(packed, device):
    s = SSSample(2, 3, EVERY + 5, 2, "var", D=True, z=True, delta_bias=True, softplus=True, init=True,
                 dtype=torch.float64, lengths=(7, 0, 14) if packed else None)
    args = s.make(device)
    names, inputs = floats(args)
    fn = lambda *xs: run({**args, **dict(zip(names, xs))})[1]
    assert torch.autograd.gradcheck(fn, [x.detach().requires_grad_() for x in inputs])


_EMPTY_ROWS = """
import os, sys, torch, torch_parprims as pp
device, bc = sys.argv[1], sys.argv[2]
d, n = 2, 4
leaf = lambda *s: torch.randn(*s, device=device).requires_grad_()
u, delta, h0 = leaf(1, d, 0), leaf(1, d, 0), leaf(1, d, n)
A = (-torch.rand(d, n, device=device)).requires_grad_()
B, C = (leaf(d, n), leaf(d, n)) if bc == "const" else (leaf(1, n, 0), leaf(1, n, 0))
out, last = pp.selective_scan(u, delta, A, B, C, initial_state=h0)
assert out.shape == (1, d, 0) and torch.equal(last, h0)
grads = torch.autograd.grad(last.sum(), (u, delta, A, B, C, h0))
assert torch.equal(grads[-1], torch.ones_like(h0)) and all(not g.any() for g in grads[:-1])
if device.startswith("cuda"):
    torch.cuda.synchronize()
print("ok", flush=True)
# Leave without the interpreter's teardown: PyTorch's autograd device threads can abort a process
# that exits right after a CUDA backward ("terminate called without an active exception").
os._exit(0)
"""


def _run_empty_rows(device, bc):
    # In a subprocess: a crash of the op must fail this test, not end the session.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    res = subprocess.run([sys.executable, "-c", _EMPTY_ROWS, device, bc], capture_output=True, text=True,
                         env=env, timeout=600)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), (
        f"exit status {res.returncode}; stderr: {res.stderr[-2000:]}")


def test_empty_rows_backward_constant_B(device):
    """L = 0 with constant B and C: the backward passes the last state's gradient to the initial state."""
    _run_empty_rows(device, "const")


def test_empty_rows_backward_variable_B(device):
    """The same with variable B and C, (1, N, 0)."""
    _run_empty_rows(device, "var")


# ---- packed sequences and state passing ----------------------------------------------------------


def _per_sequence(args, bounds):
    """The arguments of sequence [lo, hi) of a packed call, and of each sequence alone."""
    for k, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        one = dict(args, cu_seqlens=None)
        for name in ("u", "delta", "z"):
            if args[name] is not None:
                one[name] = args[name][..., lo:hi]
        for name in ("B", "C"):
            if args[name].dim() > 2:
                one[name] = args[name][..., lo:hi]
        if args["initial_state"] is not None:
            one["initial_state"] = args["initial_state"][k : k + 1]
        yield k, lo, hi, one


@pytest.mark.parametrize("offsets", ("int64", "int32", "strided"))
@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if s.lengths is not None]))
def test_packed_equals_per_sequence_calls(s, offsets, device):
    """The varlen oracle: values and last states of a packed call are those of each sequence alone."""
    args = s.make(device)
    cu = args["cu_seqlens"]
    if offsets == "int32":
        args["cu_seqlens"] = cu.to(torch.int32)
    elif offsets == "strided":  # every other element of a bigger buffer
        big = torch.full((2 * cu.numel(),), -7, dtype=cu.dtype, device=device)
        big[::2] = cu
        args["cu_seqlens"] = big[::2]
        assert args["cu_seqlens"].stride(0) == 2
    out, last = run(args)
    sout, slast = scales(args)
    bounds = cu.tolist()
    assert last.shape[0] == len(bounds) - 1
    pieces = []
    for k, lo, hi, one in _per_sequence(args, bounds):
        o, l_ = run(one)
        pieces.append(o)
        assert_close(last[k], l_[0], scale=slast[k], rtol=last_state_tol(s), what=f"last_state of sequence {k}")
    assert_close(out, torch.cat(pieces, dim=-1), scale=sout, what="out")


@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if s.lengths is not None and not s.slow]))
def test_packed_gradients_equal_per_sequence_gradients(s, device):
    args = s.make(device)
    names, inputs, out, last, gout, glast = forward_on_leaves(args)
    grads = torch.autograd.grad((out, last), inputs, (gout, glast), allow_unused=True)
    # The same loss as a sum over the sequences called one by one (on the same leaves).
    total = 0
    bounds = args["cu_seqlens"].tolist()
    for k, lo, hi, one in _per_sequence(args, bounds):
        if hi == lo and args["B"].dim() > 2:  # see test_empty_rows_backward_variable_B
            total = total + ((0 if one["initial_state"] is None else one["initial_state"][0]) * glast[k]).sum()
            continue
        o, l_ = run(one)
        total = total + (o * gout[..., lo:hi]).sum() + (l_[0] * glast[k]).sum()
    alone = torch.autograd.grad(total, inputs, allow_unused=True)
    alone = [torch.zeros_like(x) if a is None else a for x, a in zip(inputs, alone)]
    check_grads(grads, [a.double() for a in alone], names, inputs)


@pytest.mark.parametrize("bc", ("var", "group"))
def test_more_sequences_than_a_grid_dimension(bc, device):
    """70000 packed sequences of 3 steps (more than a CUDA grid dimension's 65535) give what the
    dense batch of 70000 rows of 3 steps gives: outputs, last states and every gradient."""
    seqs, steps = 70000, 3
    args = SSSample(seqs, 2, steps, 2, bc, D=True, z=True, delta_bias=True, softplus=True, init=True).make(device)
    names, inputs = leaf_floats(args)

    def pack(x):  # (seqs, ..., steps) -> (1, ..., seqs * steps): sequence k is row k
        return x.movedim(0, -2).reshape(*x.shape[1:-1], seqs * steps).unsqueeze(0)

    packed = dict(args, cu_seqlens=torch.arange(seqs + 1, device=device, dtype=torch.int32) * steps)
    for name in ("u", "delta", "z", "B", "C"):
        packed[name] = pack(args[name])
    out, last = run(args)
    pout, plast = run(packed)
    sout, slast = scales(args)
    assert_close(pout, pack(out.detach()), scale=pack(sout), what="out")
    assert_close(plast, last.detach(), scale=slast, what="last_state")
    gout, glast = grad_weights(out), grad_weights(last)
    grads = torch.autograd.grad((out, last), inputs, (gout, glast))
    pgrads = torch.autograd.grad((pout, plast), inputs, (pack(gout), glast))
    # Against the channel's largest |gradient| over every sequence: a row of 3 steps is too short
    # to set the scale (the largest of 3 gradients can be far below what the steps' sums carry,
    # and the packed and dense calls round those sums differently).
    check_grads(pgrads, [g.double() for g in grads], names, inputs, row_dims=(0, -1))


@pytest.mark.slow
def test_more_than_2_31_elements(device):
    """(1, 2^20 + 1, 2^11 + 1) bfloat16 inputs: element indices pass 2^31. Channels at both ends
    of the index range (the last one entirely past 2^31) give, forward and backward, what the
    same channels give alone."""
    if not device.startswith("cuda") or torch.cuda.get_device_properties(device).total_memory < 64 * 2**30:
        pytest.skip("a CUDA test: its tensors and gradients take about 40 GB, so it needs a GPU with 64 GB; "
                    "the CPU kernel indexes with int64 throughout")
    b, d, L, n = 1, (1 << 20) + 1, (1 << 11) + 1, 1
    assert b * d * L > 2**31
    g = torch.Generator(device=device).manual_seed(0)
    bf = dict(device=device, dtype=torch.bfloat16)
    u, z = torch.randn(b, d, L, generator=g, **bf), torch.randn(b, d, L, generator=g, **bf)
    delta = torch.rand(b, d, L, generator=g, **bf) - 2.0
    A = -torch.rand(d, n, generator=g, device=device) - 0.1
    B, C = torch.randn(b, n, L, generator=g, **bf), torch.randn(b, n, L, generator=g, **bf)
    D, bias = torch.randn(d, generator=g, device=device), torch.randn(d, generator=g, device=device) * 0.1
    leaves = [x.requires_grad_() for x in (u, delta, z, A, D, bias)]
    out, last = pp.selective_scan(u, delta, A, B, C, D, z, bias, True)
    gout = torch.randn(b, d, L, generator=g, **bf)
    grads = torch.autograd.grad(out, leaves, gout)
    for c in (0, 1 << 19, d - 1):
        one = [x.detach()[..., c : c + 1, :] if x.dim() == 3 else x.detach()[c : c + 1] for x in leaves]
        one = [x.requires_grad_() for x in one]
        o1, l1 = pp.selective_scan(one[0], one[1], one[3], B, C, one[4], one[2], one[5], True)
        g1 = torch.autograd.grad(o1, one, gout[:, c : c + 1])
        torch.testing.assert_close(out[:, c : c + 1].float(), o1.float(), rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(last[:, c : c + 1], l1, rtol=1e-4, atol=1e-4)
        for name, full, alone in zip(("u", "delta", "z", "A", "D", "delta_bias"), grads, g1):
            part = full[:, c : c + 1] if full.dim() == 3 else full[c : c + 1]
            torch.testing.assert_close(part.float(), alone.float(), rtol=2e-2, atol=2e-2, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("k", (1, EVERY - 1, EVERY, 23, 2 * EVERY + 1))
@pytest.mark.parametrize("bc", ("const", "var", "group"))
def test_state_passing(bc, k, device):
    """Scanning [0, L) equals scanning [0, k) then [k, L) from the first call's last state;
    gradients too (through last_state into the first call)."""
    s = SSSample(2, 4, 3 * EVERY + 2, 5, bc, D=True, z=True, delta_bias=True, softplus=True, init=True)
    args = s.make(device)
    names, inputs = leaf_floats(args)
    out, last = run(args)
    first = dict(args)
    second = dict(args)
    for name in ("u", "delta", "z") + (("B", "C") if bc != "const" else ()):
        first[name], second[name] = args[name][..., :k], args[name][..., k:]
    out1, last1 = run(first)
    out2, last2 = run(dict(second, initial_state=last1))
    sout, slast = scales(args)
    assert_close(torch.cat([out1, out2], dim=-1), out.detach().double(), scale=sout, what="out")
    assert_close(last2, last.detach().double(), scale=slast, what="last_state")
    gout, glast = grad_weights(out), grad_weights(last)
    grads = torch.autograd.grad((out, last), inputs, (gout, glast))
    split = torch.autograd.grad((out1, out2, last2), inputs, (gout[..., :k], gout[..., k:], glast))
    check_grads(split, [g.double() for g in grads], names, inputs)


# ---- opcheck, torch.compile, determinism ---------------------------------------------------------

OPCHECK_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def _op_args(args):
    return tuple(args[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "delta_softplus",
                                   "initial_state", "cu_seqlens"))


@pytest.mark.parametrize("save", (True, False))
@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if not s.slow], "opcheck"))
def test_selective_scan_opcheck(s, save, device):
    args = s.make(device)
    if save:  # the forward autograd runs: the backward is checked too
        for x in floats(args)[1]:
            x.requires_grad_()
    torch.library.opcheck(_ops._selective_scan_forward.default, _op_args(args) + (save,), test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("op", ("_selective_scan_backward", "_selective_scan_backward_consuming"))
@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if not s.slow], "opcheck"))
def test_selective_scan_backward_opcheck(s, op, device):
    args = s.make(device)
    out, last, checkpoints = _ops._selective_scan_forward(*_op_args(args), True)
    every = EVERY
    assert checkpoints.shape == (s.batch, s.dim, (s.L + every - 1) // every, s.N)
    gout, glast = grad_weights(out), grad_weights(last)
    torch.library.opcheck(getattr(_ops, op).default,
                          (gout, glast) + _op_args(args) + (checkpoints,),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("s", [
    SSSample(2, 64, 2 * EVERY + 8, 16, "var", D=True, z=True, delta_bias=True, softplus=True, init=True),
    SSSample(2, 64, 2 * EVERY + 8, 16, "const", D=True, z=True, init=True),
    SSSample(lengths=(EVERY + 3, 0, 2 * EVERY), bc="group", D=True, z=True, init=True, dim=64, N=16),
], ids=("var", "const", "packed-group"))
def test_backward_twice_through_one_graph(s, device):
    # The first backward may spend the forward's checkpoints (the CUDA kernel writes its dB/dC
    # partial sums over them); a second one through the same graph must give the same bits.
    args = s.make(device)
    names, inputs, out, last, gout, glast = forward_on_leaves(args)
    first = torch.autograd.grad((out, last), inputs, (gout, glast), retain_graph=True)
    second = torch.autograd.grad((out, last), inputs, (gout, glast))
    for a, b, name in zip(first, second, names):
        assert torch.equal(a, b), f"grad {name} differs in the second backward"
    check_grads(first, reference_grads(args, names, gout, glast), names, inputs)


def test_fwd_bwd_memory(device):
    # At the peak of fwd+bwd the op holds out, the checkpoints (as many float32 values as one
    # (batch, dim, L) array at N = 16) and du, d(delta), dz; the partial sums of variable dB and
    # dC go over the checkpoints, and the rest is small (dB, dC: (batch, N, L)).
    if not device.startswith("cuda"):
        pytest.skip("measures the CUDA kernels' peak memory with torch.cuda.max_memory_allocated; "
                    "the CPU backward keeps no checkpoints and has no such counter")
    s = SSSample(2, 512, 1024, 16, "var", D=True, z=True, delta_bias=True, softplus=True)
    args = s.make(device)
    names, inputs = leaf_floats(args)
    gout = torch.randn(s.batch, s.dim, s.L, device=device)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out, _ = run(args)
    grads = torch.autograd.grad(out, inputs, gout)
    unit = out.numel() * out.element_size()
    extra = (torch.cuda.max_memory_allocated() - before) / unit
    assert extra < 5.5, f"fwd+bwd held {extra:.2f} (batch, dim, L) arrays at its peak"
    assert all(g is not None for g in grads)


def test_backward_ops_agree(device):
    # The backward that may overwrite the checkpoints and the one that keeps them give the same
    # gradients.
    s = SSSample(2, 64, 3 * EVERY + 5, 16, "group", D=True, z=True, delta_bias=True, softplus=True, init=True)
    args = s.make(device)
    out, last, checkpoints = _ops._selective_scan_forward(*_op_args(args), True)
    gout, glast = grad_weights(out), grad_weights(last)
    kept = _ops._selective_scan_backward(gout, glast, *_op_args(args), checkpoints)
    spent = _ops._selective_scan_backward_consuming(gout, glast, *_op_args(args), checkpoints.clone())
    for a, b in zip(kept, spent):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert_close(b, a, scale=a.abs().amax() + 1e-30)


@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if not s.slow], "compile"))
def test_selective_scan_compile(s, device):
    torch._dynamo.reset()
    args = s.make(device)
    names, inputs = leaf_floats(args)
    rest = {k: v for k, v in args.items() if k not in names}

    def fn(*xs):
        return pp.selective_scan(**rest, **dict(zip(names, xs)))

    out, last = torch.compile(fn, fullgraph=True)(*inputs)
    gout, glast = grad_weights(out), grad_weights(last)
    grads = torch.autograd.grad((out, last), inputs, (gout, glast))
    eout, elast = fn(*inputs)
    eager = torch.autograd.grad((eout, elast), inputs, (gout, glast))
    assert_close(out, eout, scale=eout.abs() + 1)
    assert_close(last, elast, scale=elast.abs() + 1)
    for g, e, name in zip(grads, eager, names):
        assert_close(g, e, scale=magnitude(e) + 1, what=f"grad {name}")


# Many channel blocks per group, whose partial sums of variable dB and dC the CUDA backward
# adds (32 channels a block at N = 16, 64 at N = 8, 8 at N = 64, 4 at N = 256): 16 blocks (dim
# 512, and 500 with a partial last block), 8 and 6 (groups of 256 and 192 channels), 10 at
# N = 8, 16 at N = 64, 6 at N = 256 (two tiles of states); with time segments (one row of 4096
# steps) and packed sequences. The reference is the CPU op in float64, another implementation,
# on shapes too large for the float64 loop of `reference.py`.
MANY_BLOCK_SAMPLES = [
    SSSample(2, 512, 300, 16, "var", D=True, z=True, delta_bias=True, softplus=True, init=True),
    SSSample(2, 500, 2 * EVERY + 3, 16, "var", D=True, z=True, delta_bias=True, softplus=True),
    SSSample(2, 512, 70, 16, "group", D=True, z=True, delta_bias=True, softplus=True, init=True),
    SSSample(2, 384, 70, 16, "group", D=True, delta_bias=True, softplus=True),
    SSSample(2, 640, 70, 8, "var", D=True, z=True, delta_bias=True, softplus=True),
    SSSample(1, 128, 70, 64, "var", z=True, delta_bias=True, softplus=True, init=True),
    SSSample(2, 24, 2 * EVERY + 5, 256, "var", D=True, z=True, delta_bias=True, softplus=True, init=True),
    SSSample(2, 512, 300, 16, "var", D=True, z=True, delta_bias=True, softplus=True, dtype=torch.bfloat16),
    SSSample(1, 1024, 4096, 16, "var", D=True, z=True, delta_bias=True, softplus=True, init=True),
    SSSample(lengths=(700, 0, 1500, 3, 2300), bc="var", D=True, z=True, delta_bias=True, softplus=True, init=True,
             dim=512, N=16),
    SSSample(lengths=(900, 0, 1148, 2038, 10, 0), bc="var", D=True, z=True, delta_bias=True, softplus=True, init=True,
             dim=512, N=16, dtype=torch.bfloat16),
]


@pytest.mark.parametrize("s", sample_params(MANY_BLOCK_SAMPLES))
def test_backward_over_many_channel_blocks(s, device):
    if not device.startswith("cuda"):
        pytest.skip("checks the CUDA kernels against the CPU op in float64; on the CPU it would compare the op with itself")
    args = s.make(device)
    names, inputs, grads, gout, glast = library_grads(args)
    wide = {k: (v.detach().cpu().double() if isinstance(v, torch.Tensor) and v.is_floating_point() else
                v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in args.items()}
    for k in names:
        wide[k].requires_grad_()
    rout, rlast = run(wide)
    ref_grads = torch.autograd.grad((rout, rlast), [wide[k] for k in names], (gout.cpu().double(),
                                                                               glast.cpu().double()))
    check_grads(grads, ref_grads, names, inputs)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_backward_reads_the_incoming_gradient_in_any_layout(dtype, device):
    # Mamba's shape class (N = 16, variable B and C, inputs contiguous in time, even length): on
    # CUDA, a time-contiguous incoming gradient lets the backward read two steps an item; the
    # same values laid out (batch, L, dim) make it read one. Both against float64.
    s = SSSample(2, 96, 2 * EVERY + 2, 16, "var", D=True, z=True, delta_bias=True, softplus=True, init=True,
                 dtype=dtype)
    args = s.make(device)
    names, inputs, grads, gout, glast = library_grads(args)
    ref_grads = reference_grads(args, names, gout, glast)
    check_grads(grads, ref_grads, names, inputs)
    gout_by_time = gout.transpose(1, 2).contiguous().transpose(1, 2)  # the same values, time stride = dim
    assert gout_by_time.stride(-1) != 1 and torch.equal(gout_by_time, gout)
    out, last = run(args)  # the inputs are leaves that require grad already
    check_grads(torch.autograd.grad((out, last), inputs, (gout_by_time, glast)), ref_grads, names, inputs)


@pytest.mark.parametrize("bc", ("const", "var", "group"))
def test_backward_is_deterministic(bc, device):
    # 512 channels: 16 blocks of 32 (N = 16), whose partial sums are added in a fixed order.
    s = SSSample(3, 512, 300, 16, bc, D=True, z=True, delta_bias=True, softplus=True, init=True)
    args = s.make(device)
    names, inputs = leaf_floats(args)
    gout = glast = None
    runs = []
    for _ in range(2):
        out, last = run(args)
        if gout is None:
            gout, glast = grad_weights(out), grad_weights(last)
        runs.append(torch.autograd.grad((out, last), inputs, (gout, glast)))
    for a, b, name in zip(*runs, names):
        assert torch.equal(a, b), f"grad {name} differs between two runs"


# ---- selective_scan_fn ---------------------------------------------------------------------------


def test_selective_scan_fn_signature():
    params = list(inspect.signature(pp.selective_scan_fn).parameters.values())
    positional = [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    assert positional == ["u", "delta", "A", "B", "C", "D", "z", "delta_bias", "delta_softplus", "return_last_state"]
    defaults = {p.name: p.default for p in params[5:10]}
    assert defaults == {"D": None, "z": None, "delta_bias": None, "delta_softplus": False, "return_last_state": False}


def test_selective_scan_fn_returns(device):
    s = SSSample(2, 4, 40, 3, "var", D=True, z=True, delta_bias=True, softplus=True)
    args = s.make(device)
    pos = [args[k] for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")]
    out, last = run(args)
    alone = pp.selective_scan_fn(*pos, True)
    assert isinstance(alone, torch.Tensor)
    assert torch.equal(alone, out)
    both = pp.selective_scan_fn(*pos, True, True)
    assert isinstance(both, tuple) and len(both) == 2
    assert torch.equal(both[0], out) and torch.equal(both[1], last)
    # The keyword-only additions.
    h0 = torch.randn(2, 4, 3, device=device)
    o1, l1 = pp.selective_scan_fn(*pos, True, return_last_state=True, initial_state=h0)
    o2, l2 = run(dict(args, initial_state=h0))
    assert torch.equal(o1, o2) and torch.equal(l1, l2)
