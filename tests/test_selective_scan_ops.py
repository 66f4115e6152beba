"""selective_scan as a PyTorch op: opcheck of the forward and backward ops, torch.compile,
memory, determinism, backward layouts and many channel blocks, and selective_scan_fn's signature.
Samples and helpers: selective_scan_common.py.
"""

import inspect

import pytest
import torch

import torch_parprims as pp

from helpers import assert_close, grad_weights, magnitude, sample_params
from selective_scan_common import (
    EVERY, SAMPLES, SSSample, check_grads, floats, forward_on_leaves, leaf_floats,
    library_grads, reference_grads, run
)

_ops = torch.ops.parprims


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


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float32), ids=str)
def test_packed_forward_replays_in_a_cuda_graph(dtype, device):
    """A packed row cut into time segments (its plan, the summaries' flags and the carries folded
    beside them all on the device) captures in a CUDA graph; every replay, on new inputs copied
    into the captured ones, gives the eager call's outputs to the bit (the flags are zeroed again
    each replay, so no replay reads a summary of the one before)."""
    if not device.startswith("cuda"):
        pytest.skip("CUDA graphs need a CUDA device")
    s = SSSample(lengths=(700, 0, 1301, 5, 994, 1), bc="var", D=True, z=True, delta_bias=True, softplus=True,
                 init=True, dim=40, N=16, dtype=dtype)
    args = s.make(device)
    with torch.no_grad():
        run(args)  # warm-up: allocations and lazy initialization outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out, last = run(args)
        for _ in range(2):
            fresh = s.make(device)
            for name, x in args.items():
                if isinstance(x, torch.Tensor) and x.is_floating_point():
                    x.copy_(fresh[name])
            graph.replay()
            want_out, want_last = run(args)
            assert torch.equal(out, want_out) and torch.equal(last, want_last)


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
