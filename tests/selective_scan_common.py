"""The sample table of the selective_scan tests (test_selective_scan.py, test_selective_scan_ops.py)
and their helpers: running the op and the reference on a sample, the scale of each output, and
the library's gradients against autograd through the reference.
"""
import itertools
import math
from dataclasses import dataclass, replace
from typing import Optional

import torch

import torch_parprims as pp
from torch_parprims import reference as ref

from helpers import assert_close, grad_weights, make_offsets, rel_err, tol

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


def gradcheck_samples():
    return [replace(s, dtype=torch.float64, batch=min(s.batch, 2), dim=min(s.dim, 4), N=min(s.N, 3),
                    view="contiguous") for s in SAMPLES if s.gradcheck] + [
        SSSample(2, 4, EVERY + 3, 2, "const", D=True, z=True, delta_bias=True, softplus=True, init=True,
                 dtype=torch.float64, gradcheck=True),
        SSSample(2, 4, EVERY + 3, 2, "group", D=True, z=True, delta_bias=True, softplus=True, init=True,
                 dtype=torch.float64, gradcheck=True),
    ]


# ---- gradients ----------------------------------------------------------------------------------


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
