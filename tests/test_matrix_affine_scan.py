"""matrix_affine_scan (h_t = A_t @ h_{t-1} + b_t, d <= 8), from one sample table."""
import itertools
import math
from dataclasses import dataclass, replace
from typing import Optional

import pytest
import torch

import torch_parprims as pp
from torch_parprims import reference as ref

from helpers import (
    BIG_PATTERNS, CPU_CHUNK, GPU_MULTI_TILE, LENGTH_PATTERNS, LONG_PATTERNS, NONDET_TOL, OPCHECK_UTILS, assert_close,
    assert_same_as_eager, grad_samples, grad_weights, make_offsets, rel_err, sample_params, with_layout)

_ops = torch.ops.parprims


@dataclass(frozen=True)
class MatrixSample:
    lead: tuple  # b's leading shape (time included); b is (*lead, d), A is (*A_lead, d, d)
    d: int = 3
    dim: int = -2  # in b's dims, as the Python wrapper takes it
    A_spec: Optional[str] = None  # broadcast A over b's leading dims: "1" = size 1, "x" = kept
    dtype: torch.dtype = torch.float32
    init: bool = False
    lengths: Optional[str] = None
    reverse: bool = False
    exclusive: bool = False  # _matrix_affine_scan_exclusive
    view: str = "contiguous"  # layout of b
    slow: bool = False
    check: bool = False
    compile: bool = False

    def __str__(self):
        flags = "".join(c for c, on in (("E", self.exclusive), ("R", self.reverse), ("H", self.init)) if on)
        return (f"{'x'.join(map(str, self.lead))}-d{self.d}-dim{self.dim}-A{self.A_spec or 'full'}-"
                f"{str(self.dtype)[6:]}-{self.lengths or 'rows'}-{flags or 'I'}-{self.view}")

    @property
    def op_dim(self):  # the ops index b's leading dims
        return self.dim % (len(self.lead) + 1)

    def make(self, device):
        lead = list(self.lead)
        offsets = None
        if self.lengths:
            lengths = LENGTH_PATTERNS[self.lengths]()
            lead[self.op_dim] = sum(lengths)
            offsets = make_offsets(lengths, device=device)
        A_lead = lead
        if self.A_spec:
            A_lead = [1 if c == "1" else n for c, n in zip(self.A_spec, lead[len(lead) - len(self.A_spec):])]
        # Contractive on average (norm about 0.8), so long products stay in range.
        A = (0.4 / math.sqrt(self.d)) * torch.randn(*A_lead, self.d, self.d, dtype=torch.float64)
        b = torch.randn(*lead, self.d, dtype=torch.float64)
        A, b = A.to(self.dtype).to(device), b.to(self.dtype).to(device)
        b = with_layout(b, self.view, self.op_dim)
        h0 = None
        if self.init:
            state = [n for i, n in enumerate(lead) if i != self.op_dim] + [self.d]
            if offsets is not None:
                state.insert(0, offsets.numel() - 1)
            h0 = torch.randn(state, dtype=self.dtype, device=device)
        return A, b, h0, offsets

    def run(self, A, b, h0, offsets):
        if self.exclusive:
            return _ops._matrix_affine_scan_exclusive(A, b, self.op_dim, h0, offsets, self.reverse)
        return pp.matrix_affine_scan(A, b, self.dim, h0, offsets, self.reverse)

    def reference(self, A, b, h0, offsets):
        return ref.matrix_affine_scan(A, b, self.dim, h0, offsets, self.reverse, self.exclusive)

    def scale(self, A, b, h0, offsets):
        """Error magnitudes: the same recurrence over |A|, |b|, |h0| (entrywise)."""
        h, f = ref.matrix_affine_scan(A.abs(), b.abs(), self.dim, None if h0 is None else h0.abs(), offsets,
                                      self.reverse, self.exclusive)
        return h.cpu(), f.cpu()


def _samples():
    S = MatrixSample
    out = []
    for d, (ex, rv) in itertools.product((1, 2, 3, 4, 5, 8), itertools.product((False, True), repeat=2)):
        out.append(S((2, 33), d, exclusive=ex, reverse=rv, init=d % 2 == 1, check=d in (3, 8) and ex == rv))
    for n in (0, 1, 31, 32, 33, 2047, 2048, 2049):
        out.append(S((n,), 2, init=n % 2 == 1, reverse=n % 3 == 0, dtype=torch.float64 if n > 2000 else torch.float32))
    for dim, view in itertools.product((0, 1, -2, -3), ("contiguous", "transpose", "step", "expand")):
        out.append(S((3, 4, 21), 3, dim, init=True, view=view, reverse=view == "step", exclusive=dim == 0,
                     check=(dim, view) == (1, "transpose")))
    out += [S((3, 4, 30), 2, -2, "1x1", init=True), S((3, 4, 30), 4, -2, "xx", reverse=True, check=True),
            S((3, 30, 4), 3, 1, "11x", exclusive=True), S((3, 30), 8, -2, "x", dtype=torch.float64)]
    for i, pattern in enumerate(LENGTH_PATTERNS):
        long = pattern in LONG_PATTERNS
        out.append(S((1,) if long else (2, 1), 2 if long else 3, 0 if long else 1, init=i % 2 == 0, lengths=pattern,
                     reverse=i % 3 == 0, exclusive=i % 4 == 1, slow=long, check=pattern == "random"))
    out.append(S((12, 3), 4, 0, "1x", init=True, lengths="random", reverse=True, dtype=torch.float64))
    n = 2 * CPU_CHUNK + 5
    for ex, rv in itertools.product((False, True), repeat=2):
        out.append(S((n,), 2, init=True, exclusive=ex, reverse=rv, slow=True))
        out.append(S((1,), 2, 0, init=True, lengths="chunk_crossing_short", exclusive=ex, reverse=rv, slow=not rv or ex))
        out.append(S((GPU_MULTI_TILE + 3,), 3, init=True, exclusive=ex, reverse=rv, slow=True))
    out.append(S((2, 3, 20), 3, -2, "1x1", torch.float64, init=True, compile=True))
    return out


SAMPLES = _samples()



def _small(s):
    return s.lengths not in BIG_PATTERNS and \
        math.prod(s.lead) * s.d <= 1000


@pytest.mark.parametrize("s", sample_params(SAMPLES))
def test_matrix_affine_scan_matches_reference(s, device):
    A, b, h0, offsets = s.make(device)
    h, final = s.run(A, b, h0, offsets)
    rh, rf = s.reference(A, b, h0, offsets)
    sh, sf = s.scale(A, b, h0, offsets)
    assert h.dtype == b.dtype and final.dtype == b.dtype
    assert_close(h, rh, scale=sh, what="h")
    assert_close(final, rf, scale=sf, what="final_state")


@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if s.lengths]))
def test_matrix_affine_scan_equals_per_sequence_scans(s, device):
    A, b, h0, offsets = s.make(device)
    h, final = s.run(A, b, h0, offsets)
    sh, sf = s.scale(A, b, h0, offsets)
    bounds = offsets.tolist()
    dim = s.op_dim
    for k in range(0, len(bounds) - 1, max(1, len(bounds) // 30)):
        lo, n = bounds[k], bounds[k + 1] - bounds[k]
        A_k = A.narrow(dim, lo, n) if A.size(dim) > 1 else A
        hk, fk = s.run(A_k, b.narrow(dim, lo, n), None if h0 is None else h0[k], None)
        assert_close(h.narrow(dim, lo, n), hk, scale=sh.narrow(dim, lo, n), what=f"h of sequence {k}")
        assert_close(final[k], fk, scale=sf[k], what=f"final of sequence {k}")


@pytest.mark.parametrize("s", sample_params(grad_samples(SAMPLES, lambda s: _small(s) and not s.exclusive)))
def test_matrix_affine_scan_gradcheck(s, device):
    A, b, h0, offsets = s.make(device)
    if b.stride(s.op_dim) == 0 or 0 in b.stride():
        b = b.contiguous()
    inputs = (A.requires_grad_(), b.detach().requires_grad_()) + ((h0.requires_grad_(),) if h0 is not None else ())
    fn = lambda A, b, *h: s.run(A, b, h[0] if h else None, offsets)
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=b.numel() > 300, nondet_tol=NONDET_TOL)


@pytest.mark.parametrize("reverse", (False, True))
def test_matrix_gradient_through_final_state_only(reverse, device):
    s = MatrixSample((17, 2), 3, 0, "x1", torch.float64, True, "random", reverse)
    A, b, h0, offsets = s.make(device)
    inputs = (A.requires_grad_(), b.requires_grad_(), h0.requires_grad_())
    assert torch.autograd.gradcheck(lambda A, b, h: s.run(A, b, h, offsets)[1], inputs, nondet_tol=NONDET_TOL)
    grads = torch.autograd.grad(s.run(*inputs, offsets)[1].sum(), inputs)
    ref_grads = torch.autograd.grad(s.reference(*inputs, offsets)[1].sum(), inputs)
    for g, r, name in zip(grads, ref_grads, ("A", "b", "initial_state")):
        assert_close(g, r, scale=r.abs() + 1, what=f"grad {name}")


@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if not s.slow and _small(s)], "check"))
def test_matrix_affine_scan_opcheck(s, device):
    A, b, h0, offsets = s.make(device)
    if not s.exclusive:  # the exclusive op is a backward helper without autograd
        A.requires_grad_(), b.requires_grad_()
    op = _ops._matrix_affine_scan_exclusive.default if s.exclusive else _ops.matrix_affine_scan.default
    torch.library.opcheck(op, (A, b, s.op_dim, h0, offsets, s.reverse), test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("s", sample_params([s for s in SAMPLES if not s.slow and _small(s) and not s.exclusive], "compile"))
def test_matrix_affine_scan_compile(s, device):
    torch._dynamo.reset()
    fn = torch.compile(lambda o, A, b, *h0: s.run(A, b, h0[0] if h0 else None, o), fullgraph=True, dynamic=True)
    for grow in (0, 5):  # a second size: dynamic shapes
        lead = tuple(n + grow if i == s.op_dim else n for i, n in enumerate(s.lead))
        A, b, h0, offsets = replace(s, lead=lead).make(device)
        inputs = tuple(t.detach().requires_grad_() for t in (A, b, h0) if t is not None)
        h, f = fn(offsets, *inputs)
        wh, wf = grad_weights(h), grad_weights(f)
        grads = torch.autograd.grad((h, f), inputs, (wh, wf))
        he, fe = s.run(*inputs[:2], inputs[2] if len(inputs) > 2 else None, offsets)
        eager = torch.autograd.grad((he, fe), inputs, (wh, wf))
        assert_same_as_eager((h, f), (he, fe), grads, eager)


def test_cpu_long_matrix_recurrence_accumulates_in_double():
    """2^16 steps of near-identity 3x3 contractions on the CPU: one rounding of a double
    recurrence (about 3e-8); a float32 recurrence loses about 150x more (4e-6)."""
    n, d = 1 << 16, 3
    A = torch.eye(d) * (1 - 1e-4 * torch.rand(n, d, 1)) + 1e-3 * torch.randn(n, d, d) / d
    b = torch.randn(n, d)
    h, final = pp.matrix_affine_scan(A, b, 0)
    expected, expected_final = ref.matrix_affine_scan(A.double(), b.double(), 0)
    assert rel_err(h, expected) < 1e-7
    assert rel_err(final, expected_final) < 1e-7


@pytest.mark.parametrize("dim", (-2, 0, 1, -4, -3))
def test_op_and_wrapper_count_dim_alike(dim, device):
    """torch.ops.parprims.matrix_affine_scan takes `dim` as the wrapper does: over all of b's dims."""
    A = 0.4 * torch.randn(2, 5, 6, 3, 3, device=device)
    b = torch.randn(2, 5, 6, 3, device=device)
    h0 = torch.randn([n for i, n in enumerate(b.shape) if i != dim % 4], device=device)
    h, f = _ops.matrix_affine_scan(A, b, dim, h0)
    wh, wf = pp.matrix_affine_scan(A, b, dim, h0)
    rh, rf = ref.matrix_affine_scan(A, b, dim, h0)
    torch.testing.assert_close(h, wh, rtol=0, atol=0)
    torch.testing.assert_close(f, wf, rtol=0, atol=0)
    torch.testing.assert_close(h, rh.to(h.dtype), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(f, rf.to(f.dtype), rtol=1e-4, atol=1e-4)
    # _matrix_affine_scan_exclusive counts the same way.
    eh, _ = _ops._matrix_affine_scan_exclusive(A, b, dim, h0, None, False)
    reh, _ = ref.matrix_affine_scan(A, b, dim, h0, exclusive=True)
    torch.testing.assert_close(eh, reh.to(eh.dtype), rtol=1e-4, atol=1e-4)


def test_op_default_dim_is_the_wrappers(device):
    A = 0.4 * torch.randn(2, 7, 3, 3, device=device)
    b = torch.randn(2, 7, 3, device=device)
    h, f = _ops.matrix_affine_scan(A, b)
    wh, wf = pp.matrix_affine_scan(A, b)
    torch.testing.assert_close(h, wh, rtol=0, atol=0)
    torch.testing.assert_close(f, wf, rtol=0, atol=0)
    assert f.shape == (2, 3)


@pytest.mark.parametrize("dim", (-1, 3, 4, -5))
def test_op_rejects_the_state_dim(dim, device):
    A = torch.randn(2, 5, 6, 3, 3, device=device)
    b = torch.randn(2, 5, 6, 3, device=device)
    pattern = r"^dim: expected a time dimension of b other than its last \(state\) dimension"
    for call in (lambda: _ops.matrix_affine_scan(A, b, dim),
                 lambda: pp.matrix_affine_scan(A, b, dim),
                 lambda: _ops._matrix_affine_scan_exclusive(A, b, dim, None, None, False)):
        with pytest.raises(RuntimeError, match=pattern):
            call()
