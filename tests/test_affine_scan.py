"""affine_scan (h_t = a_t h_{t-1} + b_t) and _affine_scan_exclusive, from one sample table."""
import itertools
import math
from dataclasses import dataclass, replace
from typing import Optional

import pytest
import torch

import torch_parprims as pp
from torch_parprims import reference as ref

from helpers import (
    BIG_PATTERNS, CPU_CHUNK, GPU_MULTI_TILE, HALF, LENGTH_PATTERNS, LONG_PATTERNS, NONDET_TOL, OPCHECK_UTILS,
    OPCHECK_UTILS_NO_AUTOGRAD,
    assert_close, assert_same_as_eager, grad_leaf, grad_samples, grad_weights, make_offsets, rel_err, sample_params,
    strided_copy, with_layout)

_ops = torch.ops.parprims


@dataclass(frozen=True)
class AffineSample:
    shape: tuple  # b's shape; with `lengths`, the packed dimension's size is replaced by the total
    dim: int = -1
    a_spec: Optional[str] = None  # broadcast a: one letter per trailing dim of b, "1" = size 1, "x" = kept
    dtype: torch.dtype = torch.float32
    init: str = "none"  # none | state (float32 for half inputs) | input (the input dtype)
    lengths: Optional[str] = None  # a key of helpers.LENGTH_PATTERNS: packed sequences
    reverse: bool = False
    log_gates: bool = False
    exclusive: bool = False  # _affine_scan_exclusive
    view: str = "contiguous"  # layout of b
    slow: bool = False
    check: bool = False
    compile: bool = False

    def __str__(self):
        flags = "".join(c for c, on in (("E", self.exclusive), ("R", self.reverse), ("L", self.log_gates)) if on)
        shape = "x".join(map(str, self.shape))
        return (f"{shape}-d{self.dim}-a{self.a_spec or 'full'}-{str(self.dtype)[6:]}-init_{self.init}-"
                f"{self.lengths or 'rows'}-{flags or 'I'}-{self.view}")

    def make(self, device):
        """(a, b, initial_state, offsets)"""
        shape = list(self.shape)
        dim = self.dim % len(shape)
        offsets = None
        if self.lengths:
            lengths = LENGTH_PATTERNS[self.lengths]()
            shape[dim] = sum(lengths)
            offsets = make_offsets(lengths, device=device)
        a_shape = list(shape)
        if self.a_spec:
            a_shape = [1 if c == "1" else n for c, n in zip(self.a_spec, shape[len(shape) - len(self.a_spec):])]
        a = draw_gates(a_shape, self.dtype, self.log_gates, device)
        b = draw_values(shape, self.dtype, device)
        b = with_layout(b, self.view, dim)
        h0 = None
        if self.init != "none":
            state = [n for i, n in enumerate(shape) if i != dim]
            if offsets is not None:
                state.insert(0, offsets.numel() - 1)
            sdtype = torch.float32 if (self.dtype in HALF and self.init == "state") else self.dtype
            h0 = draw_values(state, sdtype, device)
        return a, b, h0, offsets

    def run(self, a, b, h0, offsets):
        fn = _ops._affine_scan_exclusive if self.exclusive else _ops.affine_scan
        return fn(a, b, self.dim, h0, offsets, self.reverse, self.log_gates)

    def reference(self, a, b, h0, offsets):
        return ref.affine_scan(a, b, self.dim, h0, offsets, self.reverse, self.log_gates, self.exclusive)

    def scale(self, a, b, h0, offsets):
        """The magnitude of the error bound: the same recurrence over |a|, |b|, |h0|."""
        gates = a.to(ref.wide_dtype(a.dtype))
        gates = gates.exp() if self.log_gates else gates
        h, f = ref.affine_scan(gates.abs(), b.abs(), self.dim, None if h0 is None else h0.abs(), offsets,
                               self.reverse, False, self.exclusive)
        return h.cpu(), f.cpu()


def draw_gates(shape, dtype, log_gates, device):
    """Gates of modulus in [0.3, 1) (a fifth of the real ones negative), or their logs."""
    r = 0.3 + 0.7 * torch.rand(shape, dtype=torch.float64)
    if dtype.is_complex:
        theta = 2 * math.pi * torch.rand(shape, dtype=torch.float64)
        a = torch.complex(r.log(), theta) if log_gates else torch.polar(r, theta)
    else:
        a = r.log() if log_gates else r * torch.where(torch.rand(shape) < 0.2, -1.0, 1.0).double()
    return a.to(dtype).to(device)


def draw_values(shape, dtype, device):
    x = torch.randn(shape, dtype=torch.float64)
    if dtype.is_complex:
        x = torch.complex(x, torch.randn(shape, dtype=torch.float64))
    return x.to(dtype).to(device)


def _samples():
    S = AffineSample
    out = []
    # Directions, exclusive, log gates, states on a (B, C, T) tensor; a few are opcheck'ed.
    for ex, rv, lg in itertools.product((False, True), repeat=3):
        out.append(S((2, 3, 33), -1, exclusive=ex, reverse=rv, log_gates=lg, init="state" if rv else "none",
                     check=(ex, lg) == (rv, False)))
    # Odd lengths.
    for n in (0, 1, 31, 32, 33, 2047, 2048, 2049):
        out.append(S((2, n), -1, init="state" if n % 2 else "none", reverse=n % 3 == 0, exclusive=n == 33))
    # Every dim, (B, T, C) with dim=1, layouts.
    for dim, view in itertools.product((0, 1, 2, -2), ("contiguous", "transpose", "step", "expand")):
        out.append(S((4, 37, 5), dim, view=view, init="state", reverse=view == "step", exclusive=dim == 0,
                     check=(dim, view) == (1, "transpose")))
    # Broadcast gates: (1, C, 1), (C, T), (1, 1, T) for b (B, C, T); (1, 1, C) for (B, T, C) dim=1.
    out += [S((3, 4, 50), -1, "1x1", init="state"), S((3, 4, 50), -1, "xx", reverse=True, check=True),
            S((3, 4, 50), -1, "11x", log_gates=True, exclusive=True), S((3, 50, 4), 1, "11x", init="state"),
            S((3, 50, 4), 1, "1x1", reverse=True, view="transpose")]
    # dtypes: half (states float32, or given in the input dtype), double, complex gates.
    for dtype in (torch.float16, torch.bfloat16):
        out.append(S((2, 3, 300), -1, dtype=dtype, init="state", check=dtype == torch.bfloat16))
        out.append(S((2, 300, 3), 1, dtype=dtype, init="input", reverse=True, log_gates=True))
    out.append(S((2, 3, 300), -1, dtype=torch.float64, init="state", exclusive=True))
    for dtype, (rv, lg) in itertools.product((torch.complex64, torch.complex128), itertools.product((False, True), repeat=2)):
        out.append(S((2, 3, 70), -1, dtype=dtype, init="state", reverse=rv, log_gates=lg,
                     check=dtype == torch.complex128 and not rv and not lg))
    # Packed sequences with per-sequence initial and final states.
    for i, pattern in enumerate(LENGTH_PATTERNS):
        long = pattern in LONG_PATTERNS
        out.append(S((1,) if long else (2, 1, 3), 0 if long else 1,
                     init="state" if i % 2 == 0 else "none", lengths=pattern, reverse=i % 3 == 0,
                     exclusive=i % 4 == 1, log_gates=i % 5 == 2, slow=long,
                     check=pattern == "random"))
    out += [S((12, 3), 0, "1x", init="state", lengths="random", reverse=True, exclusive=True),
            S((12, 2, 3), 0, init="state", lengths="leading_trailing_empty", dtype=torch.complex64),
            S((2, 12), 1, init="input", lengths="random", dtype=torch.bfloat16, reverse=True),
            S((12, 3), 0, init="state", lengths="huge_and_tiny", dtype=torch.float64)]
    # Long rows: the chunked CPU path and GPU multi-tile rows.
    n = 2 * CPU_CHUNK + 5
    for ex, rv in itertools.product((False, True), repeat=2):
        out.append(S((1,), 0, init="state", lengths="chunk_crossing_short", exclusive=ex, reverse=rv,
                     slow=(ex, rv) != (True, True)))
        out.append(S((1,), 0, init="state", lengths="chunk_crossing", exclusive=ex, reverse=rv, slow=True))
        out.append(S((1, n), -1, init="state", exclusive=ex, reverse=rv, log_gates=ex and rv, slow=ex or rv))
        out.append(S((GPU_MULTI_TILE + 3, 3), 0, init="state", exclusive=ex, reverse=rv, slow=True))
    out.append(S((n, 1), 0, dtype=torch.complex64, init="state", view="step", slow=True))
    # Enough rows, each half a tile or more long, for the GPU's row-loop kernel (a block per row).
    out += [S((300, 2100), -1, init="state"),
            S((300, 2100), -1, init="state", reverse=True, exclusive=True, log_gates=True),
            S((2, 150, 1100), -1, "1x", dtype=torch.bfloat16, init="state", reverse=True),
            S((280, 1030), -1, dtype=torch.float64, init="state", exclusive=True),
            S((270, 600), -1, dtype=torch.complex64, init="state", reverse=True),
            S((300, 1500), -1, init="none", view="step"),
            # More rows than any GPU runs blocks at once: a block a row for float32, resident
            # blocks walking several rows for bfloat16 (kBlockPerRow in the CUDA policy).
            S((4000, 600), -1, init="state", reverse=True),
            S((4000, 520), -1, dtype=torch.bfloat16, init="state", exclusive=True),
            # Half inputs held as loaded until used (rows whose starts are 16-byte aligned or
            # not, a ragged last tile, log gates exponentiated at the use).
            S((300, 2100), -1, dtype=torch.float16, init="state", reverse=True, log_gates=True),
            S((300, 2048), -1, dtype=torch.bfloat16, init="state", log_gates=True)]
    # Short rows (a warp's tile up to the row loop's blocks' tile): on CUDA, one-warp blocks, each
    # walking several rows (more rows than run at once), float32 pairs only.
    out += [S((4000, 280), -1, init="state", reverse=True),
            S((3500, 300), -1, init="state", exclusive=True, log_gates=True, view="step")]
    # Long strided time with few channels: the CUDA column kernel cuts each row into spans (a
    # summary pass, then the full pass from the spans' totals); 40 and 17 channels leave the
    # last block of 16 or 32 partial, and packed sequences cross the spans' boundaries.
    out += [S((6000, 40), 0, init="state"),
            S((6000, 40), 0, init="state", reverse=True, exclusive=True),
            S((3, 5000, 17), 1, init="state", log_gates=True),
            S((1, 40), 0, init="state", lengths="huge_and_tiny", reverse=True),
            S((1, 40), 0, init="state", lengths="huge_and_tiny", exclusive=True, dtype=torch.bfloat16),
            S((1, 17), 0, init="state", lengths="huge_and_tiny", dtype=torch.complex64),
            # Hundreds of spans per row: the carry kernel's threads each fold several.
            S((1, 16), 0, init="state", lengths="chunk_crossing_short", reverse=True),
            S((40000, 16), 0, init="state", exclusive=True)]
    # Channels contiguous, 2-byte inputs, on the CUDA column kernel: one pass and spans (packed
    # sequences along dim 0, whose span summaries walk from their last sequence start), even and
    # odd channel counts, a strided time dim, a b one element into its buffer, broadcast gates.
    out += [S((3, 700, 64), 1, dtype=torch.bfloat16, init="state", log_gates=True),
            S((3, 700, 64), 1, dtype=torch.float16, init="input", reverse=True, exclusive=True),
            S((2, 900, 34), 1, dtype=torch.bfloat16, init="state", view="step", reverse=True),
            S((1, 40), 0, dtype=torch.bfloat16, init="state", lengths="huge_and_tiny", log_gates=True),
            S((1, 64), 0, dtype=torch.float16, init="state", lengths="chunk_crossing_short", reverse=True,
              exclusive=True),
            S((2, 700, 33), 1, dtype=torch.bfloat16, init="state"),
            S((2, 700, 64), 1, dtype=torch.bfloat16, init="state", view="shifted"),
            S((2, 700, 64), 1, "11x", dtype=torch.bfloat16, init="state", exclusive=True),
            S((2, 700, 64), 1, "1x1", dtype=torch.float16, init="state", reverse=True)]
    # Packed sequences along the contiguous dim: on CUDA, the row loop's packed instance (one
    # long row in spans; 300 rows, a block each), initial and final states per sequence.
    out += [S((1,), 0, init="state", lengths="tile_edges", reverse=True),
            S((1,), 0, init="state", lengths="many_tiny", exclusive=True, dtype=torch.bfloat16),
            S((1,), 0, init="none", lengths="tile_edges", log_gates=True, dtype=torch.float64),
            S((300, 1), 1, init="state", lengths="rows_1100"),
            S((300, 1), 1, init="state", lengths="rows_1100", reverse=True, exclusive=True, dtype=torch.bfloat16)]
    # Few long rows along the contiguous dim: on CUDA, rows cut into spans.
    out += [S((5, 40000), -1, init="state", reverse=True, log_gates=True),
            S((300001,), 0, init="state", exclusive=True, dtype=torch.bfloat16),
            # Rows of hundreds of spans, final states from the last.
            S((2, 700001), -1, init="state", reverse=True),
            S((2, 700001), -1, init="state", exclusive=True, log_gates=True, dtype=torch.bfloat16)]
    # torch.compile samples.
    out.append(S((2, 3, 40), -1, "1x1", dtype=torch.float64, init="state", compile=True))
    out.append(S((6, 2), 0, init="state", lengths="random", reverse=True, log_gates=True, compile=True))
    return out


SAMPLES = _samples()


def _small(s):
    return s.lengths not in BIG_PATTERNS and \
        math.prod(s.shape) <= 2500


# Initial states in the state dtype; _affine_scan_exclusive is a backward helper without autograd.
GRAD_SAMPLES = grad_samples((replace(s, init="state" if s.init != "none" else "none") for s in SAMPLES),
                            lambda s: _small(s) and not s.exclusive)


# ---- reference comparison ----------------------------------------------------------------


@pytest.mark.parametrize("s", sample_params(SAMPLES))
def test_affine_scan_matches_reference(s, device):
    a, b, h0, offsets = s.make(device)
    h, final = s.run(a, b, h0, offsets)
    rh, rf = s.reference(a, b, h0, offsets)
    sh, sf = s.scale(a, b, h0, offsets)
    assert h.dtype == b.dtype and h.shape == b.shape
    assert final.dtype == (torch.float32 if s.dtype in HALF else s.dtype)
    assert_close(h, rh, scale=sh, what="h")
    # final_state: computed in float32 for half inputs, so held to float32 accuracy
    assert_close(final, rf, scale=sf, what="final_state")
    if not s.exclusive:  # the final state is the last h of each sequence
        bounds = offsets.tolist() if offsets is not None else [0, b.size(s.dim)]
        for k in range(len(bounds) - 1):
            if bounds[k + 1] > bounds[k]:
                last = h.select(s.dim, bounds[k] if s.reverse else bounds[k + 1] - 1)
                got = final[k] if offsets is not None else final
                assert_close(got.to(last.dtype), last, scale=0, what=f"final of sequence {k}")
                if k > 3:
                    break


@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if s.lengths]))
def test_affine_scan_equals_per_sequence_scans(s, device):
    """The varlen oracle, with per-sequence initial states and final states."""
    a, b, h0, offsets = s.make(device)
    h, final = s.run(a, b, h0, offsets)
    sh, sf = s.scale(a, b, h0, offsets)  # per sequence, the same as packed
    bounds = offsets.tolist()
    order = sorted(range(len(bounds) - 1), key=lambda k: bounds[k] - bounds[k + 1])
    for k in sorted(set(order[:4]) | set(range(0, len(bounds) - 1, max(1, len(bounds) // 30)))):
        lo, n = bounds[k], bounds[k + 1] - bounds[k]
        a_k = a.narrow(s.dim, lo, n) if a.size(s.dim) > 1 else a
        hk, fk = s.run(a_k, b.narrow(s.dim, lo, n), None if h0 is None else h0[k], None)
        assert_close(h.narrow(s.dim, lo, n), hk, scale=sh.narrow(s.dim, lo, n), what=f"h of sequence {k}")
        assert_close(final[k], fk, scale=sf[k], what=f"final of sequence {k}")


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("reverse", (False, True))
@pytest.mark.parametrize("log_gates", (False, True))
def test_cpu_half_rows_in_blocks_equal_elementwise(dtype, reverse, log_gates):
    """On the CPU, half gates and inputs with unit stride are converted a block of positions at a
    time (strided ones one element at a time), with the same combines in the same order: the
    states and final states are the same bits, around every block edge, with initial states, in
    packed sequences, and in long rows cut into chunks."""
    def check(shape, offsets=None, with_initial=False):
        a, b = draw_gates(shape, dtype, log_gates, "cpu"), draw_values(shape, dtype, "cpu")
        states = shape[:-1] if offsets is None else (offsets.numel() - 1, *shape[:-1])
        h0 = torch.randn(states) if with_initial else None
        run = lambda a, b: pp.affine_scan(a, b, -1, h0, offsets, reverse, log_gates)  # noqa: E731
        (h, final), (h_el, final_el) = run(a, b), run(strided_copy(a), strided_copy(b))
        assert torch.equal(h.view(torch.int16), h_el.view(torch.int16))
        assert torch.equal(final, final_el)

    for n in (1, 63, 64, 65, 66, 129, 200):
        check((9, n), with_initial=n % 2 == 1)
    check((4, 600), torch.tensor([0, 70, 70, 135, 136, 330, 600]), with_initial=True)
    n = 2 * CPU_CHUNK + 77
    check((1, n))
    check((1, n), torch.tensor([0, 100, 100, CPU_CHUNK + 3, CPU_CHUNK + 5, n]), with_initial=True)


def test_half_initial_state_in_either_dtype(device):
    b = torch.randn(2, 3, 40, device=device).to(torch.bfloat16)
    a = torch.rand(2, 3, 40, device=device).to(torch.bfloat16)
    h0 = torch.randn(2, 3, device=device)
    h32, f32 = pp.affine_scan(a, b, initial_state=h0)
    h16, f16 = pp.affine_scan(a, b, initial_state=h0.to(torch.bfloat16))
    rh, rf = ref.affine_scan(a, b, initial_state=h0.to(torch.bfloat16))
    assert f16.dtype == torch.float32 and h16.dtype == torch.bfloat16
    assert_close(h16, rh)
    assert_close(f16, rf, scale=rf.abs() + 1)
    assert_close(f32, ref.affine_scan(a, b, initial_state=h0)[1], scale=f32.abs().double() + 1)


def test_long_sequence_with_gates_near_one(device):
    """10^6 steps with a = 1 - 1e-6 * rand in float32, against a float64 sequential loop."""
    n = 10 ** 6
    a = 1 - 1e-6 * torch.rand(n)
    b = torch.randn(n)
    h0 = torch.randn(())
    h, final = pp.affine_scan(a.to(device), b.to(device), 0, h0.to(device))
    # The float64 recurrence, one step at a time (Python floats are float64), and the same
    # recurrence over |b|: the magnitude that float32 rounding errors accumulate against.
    state, magnitude, out, scale = float(h0), abs(float(h0)), [], []
    for a_t, b_t in zip(a.tolist(), b.tolist()):
        state = a_t * state + b_t
        magnitude = a_t * magnitude + abs(b_t)
        out.append(state)
        scale.append(magnitude)
    expected, scale = torch.tensor(out, dtype=torch.float64), torch.tensor(scale, dtype=torch.float64)
    assert_close(h, expected, scale=scale)  # 1e-5 of the accumulated |b| (float32)
    assert_close(final, expected[-1], scale=scale[-1])


# ---- gradients ---------------------------------------------------------------------------------


@pytest.mark.parametrize("s", sample_params(GRAD_SAMPLES))
def test_affine_scan_gradcheck(s, device):
    a, b, h0, offsets = s.make(device)
    b, to_input = grad_leaf(b)
    a.requires_grad_()
    inputs = (a, b) + ((h0.requires_grad_(),) if h0 is not None else ())
    fn = lambda a, b, *h: s.run(a, to_input(b), h[0] if h else None, offsets)
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=b.numel() > 300, nondet_tol=NONDET_TOL)


@pytest.mark.parametrize("reverse", (False, True))
@pytest.mark.parametrize("packed", (False, True))
def test_gradient_through_final_state_only(reverse, packed, device):
    s = AffineSample((3, 2, 20), 0, "1xx", torch.float64, "state", "random" if packed else None, reverse)
    if packed:
        s = replace(s, shape=(20, 2), dim=0, a_spec="x")
    a, b, h0, offsets = s.make(device)
    inputs = (a.requires_grad_(), b.requires_grad_(), h0.requires_grad_())
    assert torch.autograd.gradcheck(lambda a, b, h: s.run(a, b, h, offsets)[1], inputs, nondet_tol=NONDET_TOL)
    # Against autograd through the reference loop.
    grads = torch.autograd.grad(s.run(*inputs, offsets)[1].sum(), inputs)
    ref_grads = torch.autograd.grad(s.reference(*inputs, offsets)[1].sum(), inputs)
    for g, r, name in zip(grads, ref_grads, ("a", "b", "initial_state")):
        assert_close(g, r, scale=r.abs() + 1, what=f"grad {name}")


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.complex64))
@pytest.mark.parametrize("log_gates", (False, True))
@pytest.mark.parametrize("reverse", (False, True))
@pytest.mark.parametrize("shape", ((2, 3, 45), (300, 2100), (4000, 600), (3, 700, 64)),
                         ids=("small", "row_loop", "many_rows", "columns"))
def test_affine_backward_matches_reference(dtype, log_gates, reverse, shape, device):
    if shape == (4000, 600) and device == "cpu":
        pytest.skip("more rows than a GPU runs blocks at once (the CUDA grid's rule); the CPU walks any count alike")
    # "columns": time along dim 1 with the channels contiguous, the CUDA column kernel's backward
    # (2-byte inputs held as loaded there, the last step without a next gate).
    columns = shape == (3, 700, 64)
    s = AffineSample(shape, 1 if columns else -1, None if columns else "x1x"[-len(shape):], dtype, "state", None,
                     reverse, log_gates)
    a, b, h0, _ = s.make(device)
    inputs = (a.requires_grad_(), b.requires_grad_(), h0.requires_grad_())
    h, f = s.run(*inputs, None)
    wh, wf = grad_weights(h), grad_weights(f)
    grads = torch.autograd.grad((h, f), inputs, (wh, wf))
    wide = [t.detach().to(ref.wide_dtype(t.dtype)).requires_grad_() for t in inputs]
    rh, rf = s.reference(*wide, None)
    ref_grads = torch.autograd.grad((rh, rf), wide, (wh.to(rh.dtype), wf.to(rf.dtype)))
    for g, r, x, name in zip(grads, ref_grads, inputs, ("a", "b", "initial_state")):
        assert g.dtype == x.dtype and g.shape == x.shape
        assert_close(g, r, scale=r.abs().max() * 4, dtype=dtype, what=f"grad {name}")


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16, torch.complex64))
@pytest.mark.parametrize("reverse,log_gates", ((False, False), (True, False), (False, True), (True, True)))
@pytest.mark.parametrize("case", ("small", "row_loop", "broadcast_gates", "no_states", "strided_grad"))
def test_one_scan_backward_matches_reference(dtype, reverse, log_gates, case, device):
    """_affine_scan_backward (the backward in one scan, reading h_{t-1} from the forward's
    output) against autograd through the float64 reference: lengths that do and do not fill
    whole runs, the row-loop shape, gates of size 1 along the rows, no initial state and no
    final-state gradient, a non-contiguous incoming gradient."""
    shape = {"row_loop": (300, 2100), "broadcast_gates": (4, 3, 301)}.get(case, (3, 2, 45))
    a_spec = "1x" if case == "broadcast_gates" else None
    init = "none" if case == "no_states" else "state"
    s = AffineSample(shape, -1, a_spec, dtype, init, None, reverse, log_gates)
    a, b, h0, _ = s.make(device)
    h, f = s.run(a, b, h0, None)
    wh = grad_weights(h)
    if case == "strided_grad":
        wh = torch.cat([wh, wh], -1)[..., ::2]
    wf = None if case == "no_states" else grad_weights(f)
    ga, gb, g0 = _ops._affine_scan_backward(a, h, wh, wf, h0, -1, reverse, log_gates)
    wide = [t.detach().to(ref.wide_dtype(t.dtype)).requires_grad_() for t in (a, b)]
    h0_wide = None if h0 is None else h0.detach().to(ref.wide_dtype(h0.dtype)).requires_grad_()
    rh, rf = s.reference(*wide, h0_wide, None)
    outputs, seeds = [rh], [wh.to(rh.dtype)]
    if wf is not None:
        outputs.append(rf)
        seeds.append(wf.to(rf.dtype))
    leaves = wide + ([h0_wide] if h0_wide is not None else [])
    ref_grads = torch.autograd.grad(outputs, leaves, seeds)
    got = [ga.sum_to_size(a.shape), gb] + ([g0] if h0 is not None else [])
    for g, r, name in zip(got, ref_grads, ("a", "b", "initial_state")):
        assert g.shape == r.shape
        assert_close(g, r, scale=r.abs().max() * 4, dtype=dtype, what=f"grad {name}")


def test_one_scan_backward_opcheck(device):
    s = AffineSample((2, 3, 33), -1, "x1x", torch.float64, "state", None, True, True)
    a, b, h0, _ = s.make(device)
    h, f = s.run(a, b, h0, None)
    args = (a, h, grad_weights(h), grad_weights(f), h0, -1, True, True)
    torch.library.opcheck(_ops._affine_scan_backward.default, args, test_utils=OPCHECK_UTILS_NO_AUTOGRAD)


# ---- the _into forms: writing into rows of a larger tensor (the sequence-parallel pipeline) -------

INTO_SAMPLES = [
    AffineSample((6, 5, 45), -1, "x1x", torch.float32, "state"),
    AffineSample((6, 5, 45), -1, None, torch.bfloat16, "input", reverse=True, log_gates=True),
    AffineSample((6, 300, 5), 1, None, torch.complex64, "state", reverse=True),
    AffineSample((6, 5, 45), -1, None, torch.float64, "state", lengths="leading_trailing_empty"),
]


def _rows_of_poisoned(like: torch.Tensor, axis: int, lo: int) -> tuple:
    """A tensor of ``like``'s dtype, three rows longer along ``axis`` and filled with NaN, and the
    view of it that ``like``'s shape covers from row ``lo``."""
    shape = list(like.shape)
    shape[axis] += 3
    whole = torch.full(shape, float("nan"), dtype=like.dtype, device=like.device)
    return whole, whole.narrow(axis, lo, like.shape[axis])


@pytest.mark.parametrize("s", INTO_SAMPLES, ids=str)
def test_affine_scan_into_writes_the_rows_it_is_given(s, device):
    """The forward and the one-scan backward written into a view (rows 1.. of a NaN-filled
    tensor) equal the allocating ops bit for bit and leave the other rows alone."""
    a, b, h0, offsets = s.make(device)
    axis = 0
    h, final = s.run(a, b, h0, offsets)
    whole, h_rows = _rows_of_poisoned(b, axis, 1)
    final_into = _ops._affine_scan_into(a, b, s.dim, h0, offsets, s.reverse, s.log_gates, h_rows)
    assert torch.equal(h_rows, h) and torch.equal(final_into, final)
    assert whole.narrow(axis, 0, 1).isnan().all() and whole.narrow(axis, 1 + b.shape[axis], 2).isnan().all()
    if offsets is not None:
        return  # the one-scan backward takes rows without packed sequences
    wh, wf = grad_weights(h), grad_weights(final)
    ga, gb, g0 = _ops._affine_scan_backward(a, h, wh, wf, h0, s.dim, s.reverse, s.log_gates)
    whole_a, ga_rows = _rows_of_poisoned(h, axis, 2)
    whole_b, gb_rows = _rows_of_poisoned(h, axis, 0)
    g0_into = _ops._affine_scan_backward_into(a, h, wh, wf, h0, s.dim, s.reverse, s.log_gates, ga_rows, gb_rows)
    assert torch.equal(ga_rows, ga) and torch.equal(gb_rows, gb) and torch.equal(g0_into, g0)
    assert whole_a.narrow(axis, 0, 2).isnan().all() and whole_b.narrow(axis, b.shape[axis], 3).isnan().all()


def test_affine_scan_into_rejects_bad_outputs(device):
    a, b = torch.rand(4, 9, device=device), torch.randn(4, 9, device=device)
    h, final = _ops.affine_scan(a, b, -1, None, None, False, False)
    into = lambda out: _ops._affine_scan_into(a, b, -1, None, None, False, False, out)  # noqa: E731
    with pytest.raises(RuntimeError, match=r"h: expected shape \[4, 9\]"):
        into(torch.empty(4, 8, device=device))
    with pytest.raises(RuntimeError, match="h: expected dtype torch.float32, got torch.float64"):
        into(torch.empty(4, 9, dtype=torch.float64, device=device))
    with pytest.raises(RuntimeError, match="h: written in place.*overlap"):
        into(torch.empty(1, 9, device=device).expand(4, 9))
    with pytest.raises(RuntimeError, match="h: written while the op reads its inputs"):
        into(b)
    grads = lambda ga, gb: _ops._affine_scan_backward_into(a, h, b, None, None, -1, False, False, ga, gb)  # noqa: E731
    with pytest.raises(RuntimeError, match="grad_a: expected dtype"):
        grads(torch.empty(4, 9, dtype=torch.float64, device=device), torch.empty(4, 9, device=device))
    with pytest.raises(RuntimeError, match="grad_b: written while the op reads its inputs"):
        buffer = torch.empty(4, 9, device=device)
        grads(buffer, buffer)


def test_affine_scan_into_opcheck(device):
    s = AffineSample((2, 3, 33), -1, "x1x", torch.float64, "state", None, True, True)
    a, b, h0, _ = s.make(device)
    h, f = s.run(a, b, h0, None)
    opcheck = lambda op, args: torch.library.opcheck(op, args, test_utils=OPCHECK_UTILS_NO_AUTOGRAD)  # noqa: E731
    opcheck(_ops._affine_scan_into.default, (a, b, -1, h0, None, True, True, torch.empty_like(b)))
    args = (a, h, grad_weights(h), grad_weights(f), h0, -1, True, True, torch.empty_like(h), torch.empty_like(h))
    opcheck(_ops._affine_scan_backward_into.default, args)


# ---- opcheck and torch.compile -------------------------------------------------------------------

@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if not s.slow and _small(s)], "check"))
def test_affine_scan_opcheck(s, device):
    a, b, h0, offsets = s.make(device)
    if not s.exclusive:  # the exclusive op is a backward helper without autograd
        a.requires_grad_(), b.requires_grad_()
    op = _ops._affine_scan_exclusive.default if s.exclusive else _ops.affine_scan.default
    torch.library.opcheck(op, (a, b, s.dim, h0, offsets, s.reverse, s.log_gates), test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if not s.slow and _small(s) and not s.exclusive], "compile"))
def test_affine_scan_compile(s, device):
    torch._dynamo.reset()
    fn = torch.compile(lambda o, a, b, *h0: s.run(a, b, h0[0] if h0 else None, o), fullgraph=True, dynamic=True)
    for grow in (0, 3):  # a second size: dynamic shapes
        shape = tuple(n + grow if i == s.dim % len(s.shape) else n for i, n in enumerate(s.shape))
        a, b, h0, offsets = replace(s, shape=shape).make(device)
        inputs = tuple(t.requires_grad_() for t in (a, b, h0) if t is not None)
        h, f = fn(offsets, *inputs)
        wh, wf = grad_weights(h), grad_weights(f)
        grads = torch.autograd.grad((h, f), inputs, (wh, wf))
        he, fe = s.run(a, b, h0, offsets)
        eager = torch.autograd.grad((he, fe), inputs, (wh, wf))
        assert_same_as_eager((h, f), (he, fe), grads, eager)


def test_cpu_long_recurrence_accumulates_in_double():
    """2^20 steps with gates near 1 on the CPU: one rounding of a double recurrence (about 3e-8);
    a float32 recurrence loses about 100x more."""
    n = 1 << 20
    a, b = 1 - 1e-4 * torch.rand(2, n), torch.randn(2, n)
    h, final = pp.affine_scan(a, b, -1)
    expected, expected_final = ref.affine_scan(a.double(), b.double(), -1)
    assert rel_err(h, expected) < 1e-7
    assert_close(final, expected_final, rtol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("reverse", (False, True))
def test_affine_scan_row_longer_than_2_to_31(reverse, device):
    """One row of 2^31 + 3 steps of h_t = h_{t-1} + 1 in float64 (exact): h at step t is t + 1,
    counted from the end when reversed."""
    if not device.startswith("cuda") or torch.cuda.get_device_properties(device).total_memory < 64 * 2**30:
        pytest.skip("a CUDA test: its tensors take about 52 GB, so it needs a GPU with 64 GB; "
                    "the CPU paths index with int64 throughout")
    n = (1 << 31) + 3
    b = torch.ones(n, dtype=torch.float64, device=device)
    h, final = pp.affine_scan(1.0, b, 0, reverse=reverse)
    del b
    expected_last = n if not reverse else 1
    assert h[-1].item() == expected_last and final.item() == n
    steps = h[1:] - h[:-1]
    assert bool((steps == (1 if not reverse else -1)).all())
