"""selective_scan (Mamba-1) against its reference, from one sample table (selective_scan_common.py).

Every sample is compared with ``reference.selective_scan`` (a float64 loop over time) for the
outputs and, through autograd on the reference, for the gradients of every floating input with a
random gradient of ``out`` and of ``last_state``; packed sequences against per-sequence calls,
and state passing. The op-level checks (opcheck, compile, determinism, selective_scan_fn) are in
test_selective_scan_ops.py.
"""

import os
import subprocess
import sys

import pytest
import torch

import torch_parprims as pp

from helpers import assert_close, grad_weights, sample_params
from selective_scan_common import (
    EVERY, SAMPLES, SSSample, gradcheck_samples, check_grads, floats, forward_on_leaves,
    last_state_tol, leaf_floats, library_grads, reference_grads, run, run_ref, scales
)


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


@pytest.mark.parametrize("s", sample_params(SAMPLES))
def test_selective_scan_backward_matches_reference(s, device):
    args = s.make(device)
    names, inputs, grads, gout, glast = library_grads(args)
    check_grads(grads, reference_grads(args, names, gout, glast), names, inputs)


@pytest.mark.parametrize("s", sample_params(gradcheck_samples()))
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


_FORWARD_IN_SUBPROCESS = """
import os, sys, torch, torch_parprims as pp
from torch.profiler import ProfilerActivity, profile
args = torch.load(sys.argv[1])
with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
    out, last = pp.selective_scan(**args)
    torch.cuda.synchronize()
kernels = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
torch.save((out, last, kernels), sys.argv[2])
print("ok", flush=True)
os._exit(0)
"""


def _forward_in_subprocess(args, tmp_path, name, **env):
    """(out, last_state, names of the CUDA kernels it ran) of a no-grad forward of ``args`` in a
    subprocess with ``env`` added to its environment (the library reads its PARPRIMS_* switches
    once, when a process first needs them)."""
    torch.save(args, tmp_path / "args.pt")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, **env, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    result = tmp_path / f"{name}.pt"
    res = subprocess.run([sys.executable, "-c", _FORWARD_IN_SUBPROCESS, str(tmp_path / "args.pt"), str(result)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), (
        f"{name}: exit status {res.returncode}; stderr: {res.stderr[-2000:]}")
    return torch.load(result)


@pytest.mark.parametrize("s", [
    SSSample(2, 40, 4 * EVERY + 6, 16, "var", D=True, z=True, delta_bias=True, softplus=True, init=True),
    SSSample(3, 33, 2 * EVERY + 3, 16, "var", z=True, softplus=True, dtype=torch.bfloat16, view="transposed"),
    SSSample(lengths=(5, 0, 70, 1, 2 * EVERY), bc="var", D=True, z=True, delta_bias=True, softplus=True,
             init=True, dim=36, N=16, dtype=torch.float16),
], ids=str)
def test_specialized_forward_matches_plain_kernel(s, device, tmp_path):
    """On CUDA, N = 16 with variable B and C runs the forward's full pass warp-specialized; the
    plain kernel (PARPRIMS_NO_SPECIALIZED_FORWARD=1, in a subprocess) computes the same outputs."""
    if not device.startswith("cuda"):
        pytest.skip("compares two CUDA kernels of the forward (the CPU has one; the reference tests cover it)")
    args = s.make(device)
    with torch.no_grad():
        out, last = run(args)
    plain_out, plain_last, _ = _forward_in_subprocess(args, tmp_path, "plain", PARPRIMS_NO_SPECIALIZED_FORWARD="1")
    sout, slast = scales(args)
    assert_close(out, plain_out, scale=sout, what="out")
    assert_close(last, plain_last, scale=slast, rtol=1e-5, what="last_state")


@pytest.mark.parametrize("cuts", ("uniform", "starts"))
def test_folded_carries_match_combine_pass(cuts, device, tmp_path):
    """A packed row at N = 16 cut into time segments: the full pass that folds its carries beside
    the summary pass gives, to the bit, what the full pass after a combine pass gives
    (PARPRIMS_NO_FOLDED_CARRIES=1), with the row cut uniformly (carries folded across segments
    inside one sequence) and at sequence starts; both match the reference."""
    if not device.startswith("cuda"):
        pytest.skip("compares two schedules of the CUDA forward's time segments (the CPU walks each row whole; "
                    "the reference tests cover it)")
    s = SSSample(lengths=(700, 0, 1301, 5, 994, 1), bc="var", D=True, z=True, delta_bias=True, softplus=True,
                 init=True, dim=40, N=16, dtype=torch.bfloat16)
    args = s.make(device)
    forced = dict(PARPRIMS_TIME_SEGMENTS="5", PARPRIMS_TIME_SEGMENT_CUTS=cuts)
    *folded, folded_kernels = _forward_in_subprocess(args, tmp_path, "folded", **forced)
    *combined, combined_kernels = _forward_in_subprocess(args, tmp_path, "combined", PARPRIMS_NO_FOLDED_CARRIES="1",
                                                         **forced)
    combine_passes = [any("combine_segments" in k for k in kernels) for kernels in (folded_kernels, combined_kernels)]
    assert combine_passes == [False, True], (folded_kernels, combined_kernels)
    for what, a, b in zip(("out", "last_state"), folded, combined):
        assert torch.equal(a, b), f"{what}: the folded carries differ from the combine pass's"
    rout, rlast = run_ref(args)
    sout, slast = scales(args)
    assert_close(folded[0], rout, scale=sout, what="out")
    assert_close(folded[1], rlast, scale=slast, rtol=last_state_tol(s), what="last_state")


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
