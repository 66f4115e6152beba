"""torch_parprims.nn: the packed causal convolution, the Mamba mixer and the small language model.

The mixer is compared with a pure-PyTorch transcription of mamba-ssm's ``Mamba.forward`` (its
path without fused kernels) that reads the same state_dict and scans with
``reference.selective_scan``. Packed batches are compared with each sequence alone, decoding
steps with the forward over the same tokens.
"""
import math

import pytest
import torch
import torch.nn.functional as F

import torch_parprims as pp
from torch_parprims import reference as ref
from torch_parprims.nn import Mamba, MambaLM, causal_conv1d

from helpers import make_offsets

F64 = torch.float64


def _leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def _segments(offsets):
    o = offsets.tolist()
    return list(zip(o[:-1], o[1:]))


# ---- causal_conv1d --------------------------------------------------------------------------


def _conv_module_reference(x, weight, bias, activation):
    """torch.nn.Conv1d as Mamba uses it: padding width - 1, the first L outputs."""
    conv = torch.nn.Conv1d(x.shape[1], x.shape[1], weight.shape[1], groups=x.shape[1], padding=weight.shape[1] - 1,
                           bias=bias is not None, dtype=x.dtype, device=x.device)
    with torch.no_grad():
        conv.weight.copy_(weight[:, None])
        if bias is not None:
            conv.bias.copy_(bias)
    out = conv(x)[..., : x.shape[-1]]
    return F.silu(out) if activation else out


@pytest.mark.parametrize("width", [1, 2, 4])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("activation", [None, "silu"])
def test_causal_conv1d_matches_conv1d_module(device, width, with_bias, activation):
    x = torch.randn(3, 6, 17, dtype=F64, device=device)
    weight = torch.randn(6, width, dtype=F64, device=device)
    bias = torch.randn(6, dtype=F64, device=device) if with_bias else None
    out = causal_conv1d(x, weight, bias, activation=activation)
    torch.testing.assert_close(out, _conv_module_reference(x, weight, bias, activation))


@pytest.mark.parametrize("lengths", [(5, 0, 1, 2, 9, 3), (1, 1, 1), (0, 13, 0), (4,)], ids=str)
@pytest.mark.parametrize("offsets_dtype", [torch.int32, torch.int64])
def test_causal_conv1d_packed_equals_each_sequence(device, lengths, offsets_dtype):
    offsets = make_offsets(lengths, offsets_dtype, device)
    total, channels, width = sum(lengths), 5, 4
    x, weight, bias = _leaves(torch.randn(1, channels, total, dtype=F64, device=device),
                              torch.randn(channels, width, dtype=F64, device=device),
                              torch.randn(channels, dtype=F64, device=device))
    grad = torch.randn(1, channels, total, dtype=F64, device=device)
    packed = causal_conv1d(x, weight, bias, cu_seqlens=offsets, activation="silu")
    packed_grads = torch.autograd.grad(packed, (x, weight, bias), grad)

    alone = [causal_conv1d(x[..., s:e], weight, bias, activation="silu") for s, e in _segments(offsets)]
    alone = torch.cat(alone, dim=-1)
    alone_grads = torch.autograd.grad(alone, (x, weight, bias), grad)
    torch.testing.assert_close(packed, alone)
    for got, want, name in zip(packed_grads, alone_grads, ("x", "weight", "bias")):
        torch.testing.assert_close(got, want, msg=lambda m: f"grad of {name}: {m}")


def test_causal_conv1d_reads_views_and_half(device):
    base = torch.randn(1, 40, 12, device=device)  # (batch, L, channels): x is a transposed view
    offsets = make_offsets((10, 30), device=device)
    weight, bias = torch.randn(12, 4, device=device), torch.randn(12, device=device)
    want = causal_conv1d(base.transpose(1, 2).contiguous(), weight, bias, offsets)
    torch.testing.assert_close(causal_conv1d(base.transpose(1, 2), weight, bias, offsets), want)
    half = causal_conv1d(base.transpose(1, 2).bfloat16(), weight, bias, offsets)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), want, atol=0.1, rtol=0.05)


_BAD_OFFSETS = [
    (lambda d: torch.tensor([1, 4, 10], device=d), RuntimeError, "offsets"),  # not starting at 0
    (lambda d: torch.tensor([0, 6, 4, 10], device=d), RuntimeError, "offsets"),  # decreasing
    (lambda d: torch.tensor([0, 4, 9], device=d), RuntimeError, "offsets"),  # last != L
    (lambda d: torch.tensor([0.0, 4.0, 10.0], device=d), ValueError, "int32 or int64"),
    (lambda d: torch.tensor([[0, 4, 10]], device=d), ValueError, "1-D"),
    (lambda d: [0, 4, 10], TypeError, "torch.Tensor"),
]


@pytest.mark.parametrize("case", range(len(_BAD_OFFSETS)))
def test_causal_conv1d_bad_offsets(device, case):
    make, error, words = _BAD_OFFSETS[case]
    x, weight = torch.randn(1, 3, 10, device=device), torch.randn(3, 4, device=device)
    pp.set_checks(True)  # CUDA validates offset values only with checks on; the CPU always does
    with pytest.raises(error, match=words):
        causal_conv1d(x, weight, cu_seqlens=make(device))


def test_causal_conv1d_bad_arguments():
    x, weight, cu = torch.randn(1, 3, 10), torch.randn(3, 4), torch.tensor([0, 10])
    with pytest.raises(ValueError, match="batch 1"):
        causal_conv1d(torch.randn(2, 3, 10), weight, cu_seqlens=cu)
    with pytest.raises(ValueError, match="weight"):
        causal_conv1d(x, torch.randn(4, 4))
    with pytest.raises(ValueError, match="bias"):
        causal_conv1d(x, weight, torch.randn(4))
    with pytest.raises(ValueError, match="activation"):
        causal_conv1d(x, weight, activation="relu")
    with pytest.raises(TypeError, match="one of them"):
        causal_conv1d(x, weight, None, cu, cu_seqlens=cu)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_causal_conv1d_offsets_on_another_device():
    x, weight = torch.randn(1, 3, 10, device="cuda"), torch.randn(3, 4, device="cuda")
    with pytest.raises(ValueError, match="device"):
        causal_conv1d(x, weight, cu_seqlens=torch.tensor([0, 10]))


# ---- Mamba against mamba-ssm's forward -------------------------------------------------------


def mamba_ssm_forward(p, hidden_states, d_state, dt_rank):
    """mamba-ssm's ``Mamba.forward`` without fused kernels, on a state_dict ``p``."""
    seqlen = hidden_states.shape[1]
    xz = (p["in_proj.weight"] @ hidden_states.reshape(-1, hidden_states.shape[-1]).t())
    xz = xz.reshape(xz.shape[0], -1, seqlen).transpose(0, 1)  # "d (b l) -> b d l"
    A = -torch.exp(p["A_log"].float() if p["A_log"].dtype != F64 else p["A_log"])
    x, z = xz.chunk(2, dim=1)
    d_inner, d_conv = p["conv1d.weight"].shape[0], p["conv1d.weight"].shape[-1]
    x = F.silu(F.conv1d(x, p["conv1d.weight"], p["conv1d.bias"], padding=d_conv - 1, groups=d_inner)[..., :seqlen])
    x_dbl = F.linear(x.transpose(1, 2).reshape(-1, d_inner), p["x_proj.weight"])  # "(b l) d"
    dt, B, C = torch.split(x_dbl, [dt_rank, d_state, d_state], dim=-1)
    dt = (p["dt_proj.weight"] @ dt.t()).reshape(d_inner, -1, seqlen).transpose(0, 1)
    B = B.reshape(-1, seqlen, d_state).transpose(1, 2)
    C = C.reshape(-1, seqlen, d_state).transpose(1, 2)
    y, _ = ref.selective_scan(x, dt, A, B, C, p["D"], z=z, delta_bias=p["dt_proj.bias"], delta_softplus=True)
    return F.linear(y.transpose(1, 2).to(hidden_states.dtype), p["out_proj.weight"])


def _random_trained_like(block):
    """Moves every parameter off its initial value, so that no term is hidden by a zero or one."""
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return block


def test_mamba_matches_mamba_ssm_forward_and_grads(device):
    torch.manual_seed(0)
    block = _random_trained_like(Mamba(d_model=24, d_state=8, device=device).to(F64))
    x = torch.randn(2, 19, 24, dtype=F64, device=device, requires_grad=True)
    params = {k: v.detach().clone().requires_grad_() for k, v in block.state_dict().items()}
    grad = torch.randn(2, 19, 24, dtype=F64, device=device)

    out = block(x)
    want = mamba_ssm_forward(params, x, block.d_state, block.dt_rank)
    torch.testing.assert_close(out, want)

    names = [n for n, _ in block.named_parameters()]
    got = torch.autograd.grad(out, [x] + list(block.parameters()), grad)
    expected = torch.autograd.grad(want, [x] + [params[n] for n in names], grad)
    for name, g, e in zip(["x"] + names, got, expected):
        torch.testing.assert_close(g, e, msg=lambda m: f"grad of {name}: {m}")


# mamba-ssm's Mamba(d_model=64): every parameter's name and shape.
MAMBA_SSM_SHAPES_D64 = {
    "A_log": (128, 16),
    "D": (128,),
    "in_proj.weight": (256, 64),
    "conv1d.weight": (128, 1, 4),
    "conv1d.bias": (128,),
    "x_proj.weight": (4 + 32, 128),
    "dt_proj.weight": (128, 4),
    "dt_proj.bias": (128,),
    "out_proj.weight": (64, 128),
}


def test_mamba_parameters_and_initialization_are_mamba_ssm():
    block = Mamba(d_model=64, dt_min=0.002, dt_max=0.05)
    assert {k: tuple(v.shape) for k, v in block.state_dict().items()} == MAMBA_SSM_SHAPES_D64
    assert block.A_log.dtype == block.D.dtype == torch.float32
    torch.testing.assert_close(block.A_log, torch.log(torch.arange(1.0, 17.0)).expand(128, 16))
    assert torch.equal(block.D, torch.ones(128))
    assert block.A_log._no_weight_decay and block.D._no_weight_decay
    dt = F.softplus(block.dt_proj.bias)
    assert dt.min() >= 0.002 * (1 - 1e-5) and dt.max() <= 0.05 * (1 + 1e-5)
    assert dt.max() / dt.min() > 5  # spread over the range, not a constant
    assert block.dt_proj.weight.abs().max() <= 4 ** -0.5
    # A mamba-ssm state_dict (same keys and shapes) loads strictly.
    other = {k: torch.randn(v) for k, v in MAMBA_SSM_SHAPES_D64.items()}
    block.load_state_dict(other, strict=True)
    assert torch.equal(block.x_proj.weight, other["x_proj.weight"])


def test_mamba_rejects_bad_arguments():
    block = Mamba(d_model=16)
    with pytest.raises(ValueError, match="batch 1"):
        block(torch.randn(2, 5, 16), cu_seqlens=torch.tensor([0, 5]))
    with pytest.raises(ValueError, match="hidden_states"):
        block(torch.randn(1, 5, 8))
    with pytest.raises(RuntimeError, match="cu_seqlens|offsets"):
        block(torch.randn(1, 5, 16), cu_seqlens=torch.tensor([0, 2, 4]))  # ends before L
    with pytest.raises(RuntimeError, match="cu_seqlens|offsets"):
        block(torch.randn(1, 5, 16), cu_seqlens=torch.tensor([0, 3, 2, 5]))  # decreasing
    with pytest.raises(ValueError, match="int32 or int64"):
        block(torch.randn(1, 5, 16), cu_seqlens=torch.tensor([0.0, 5.0]))
    with pytest.raises(ValueError, match="scan_impl"):
        Mamba(d_model=16, scan_impl="fast")


# ---- packed batches, decoding -------------------------------------------------------------------


@pytest.mark.parametrize("lengths", [(7, 0, 1, 3, 12), (20,)], ids=str)
def test_mamba_packed_equals_each_sequence(device, lengths):
    block = _random_trained_like(Mamba(d_model=16, d_state=4, device=device).to(F64))
    offsets = make_offsets(lengths, torch.int32, device)
    x = torch.randn(1, sum(lengths), 16, dtype=F64, device=device, requires_grad=True)
    grad = torch.randn_like(x)
    params = list(block.parameters())

    packed = block(x, cu_seqlens=offsets)
    packed_grads = torch.autograd.grad(packed, [x] + params, grad)
    alone = torch.cat([block(x[:, s:e]) for s, e in _segments(offsets) if e > s], dim=1)
    alone_grads = torch.autograd.grad(alone, [x] + params, grad)
    torch.testing.assert_close(packed, alone)
    names = ["x"] + [n for n, _ in block.named_parameters()]
    for name, g, e in zip(names, packed_grads, alone_grads):
        torch.testing.assert_close(g, e, msg=lambda m: f"grad of {name}: {m}")


def test_mamba_reference_scan_impl_matches_fused(device):
    fused = _random_trained_like(Mamba(d_model=16, d_state=4, device=device))
    slow = Mamba(d_model=16, d_state=4, scan_impl="reference", device=device)
    slow.load_state_dict(fused.state_dict())
    x, offsets = torch.randn(1, 30, 16, device=device), make_offsets((10, 20), device=device)
    torch.testing.assert_close(slow(x, offsets), fused(x, offsets), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_mamba_step_equals_forward(device, dtype):
    block = _random_trained_like(Mamba(d_model=16, d_state=4, d_conv=3, device=device).to(dtype)).eval()
    x = torch.randn(3, 9, 16, dtype=dtype, device=device)
    conv_state, ssm_state = block.allocate_inference_cache(batch_size=3)
    assert conv_state.shape == (3, 32, 3) and ssm_state.shape == (3, 32, 4)
    assert ssm_state.dtype == (F64 if dtype == F64 else torch.float32)
    steps = []
    for t in range(9):
        out, conv_back, ssm_back = block.step(x[:, t : t + 1], conv_state, ssm_state)
        assert conv_back is conv_state and ssm_back is ssm_state  # updated in place
        steps.append(out)
    with torch.no_grad():
        want = block(x)
    tolerance = {} if dtype == F64 else {"atol": 1e-5, "rtol": 1e-4}
    torch.testing.assert_close(torch.cat(steps, dim=1), want, **tolerance)


def test_lm_step_equals_forward_and_packed_equals_each_sequence(device):
    model = MambaLM(vocab_size=11, d_model=16, n_layer=2, d_state=4, device=device).to(F64).eval()
    ids = torch.randint(0, 11, (2, 8), device=device)
    cache = model.allocate_inference_cache(batch_size=2)
    steps = torch.cat([model.step(ids[:, t : t + 1], cache) for t in range(8)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(steps, model(ids))
        packed = model(ids.reshape(1, -1), cu_seqlens=make_offsets((8, 8), device=device))
        torch.testing.assert_close(packed.reshape(2, 8, -1), model(ids))


def test_lm_ties_head_and_scales_out_proj():
    model = MambaLM(vocab_size=50, d_model=32, n_layer=4)
    assert model.lm_head.weight is model.backbone.embedding.weight
    keys = set(model.state_dict())
    assert {"backbone.embedding.weight", "backbone.layers.3.norm.weight", "backbone.layers.0.mixer.A_log",
            "backbone.norm_f.weight", "lm_head.weight"} <= keys
    # kaiming_uniform(a=sqrt(5)) bounds a weight by 1/sqrt(fan_in); then divided by sqrt(n_layer).
    bound = 1 / math.sqrt(64) / math.sqrt(4)
    assert model.backbone.layers[0].mixer.out_proj.weight.abs().max() <= bound
    assert model.backbone.embedding.weight.std().item() == pytest.approx(0.02, rel=0.1)


# ---- torch.compile, training ---------------------------------------------------------------------


def test_mamba_compiles_fullgraph_forward_and_backward(device):
    block = Mamba(d_model=16, d_state=4, device=device)
    x = torch.randn(1, 12, 16, device=device, requires_grad=True)
    offsets = make_offsets((5, 7), torch.int32, device)

    def loss(x, offsets):
        return block(x, cu_seqlens=offsets).square().sum()

    eager = loss(x, offsets)
    eager_grads = torch.autograd.grad(eager, [x] + list(block.parameters()))
    compiled = torch.compile(loss, fullgraph=True)(x, offsets)
    compiled_grads = torch.autograd.grad(compiled, [x] + list(block.parameters()))
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-4)
    for g, e in zip(compiled_grads, eager_grads):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)


def test_short_training_run_lowers_the_loss(device):
    """Next-token prediction of a repeating pattern, in packed batches of varying lengths."""
    torch.manual_seed(0)
    model = MambaLM(vocab_size=8, d_model=32, n_layer=2, d_state=8, device=device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    lengths = (9, 20, 3, 14)
    offsets = make_offsets(lengths, device=device)
    starts = torch.cat([torch.full((n,), torch.randint(0, 8, ()).item()) for n in lengths])
    position = torch.cat([torch.arange(n) for n in lengths])
    ids = ((starts + 3 * position) % 8).to(device)[None]  # each sequence counts up by 3 mod 8
    losses = []
    for _ in range(30):
        logits = model(ids, cu_seqlens=offsets)
        loss = F.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="none")
        # no target across a sequence end: the next sequence starts afresh
        loss = loss[(position[1:] != 0).to(device)].mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0], losses


def test_train_packed_example_runs(tmp_path):
    """The example end to end at a toy size: it trains, plots, times, and writes its results."""
    pytest.importorskip("tqdm")
    pytest.importorskip("matplotlib")
    import importlib.util
    import json
    import os

    path = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "train_packed.py")
    spec = importlib.util.spec_from_file_location("train_packed", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    plot, results = tmp_path / "curves.png", tmp_path / "results.json"
    example.main(["--steps", "12", "--eval-every", "6", "--d-model", "16", "--d-state", "4", "--seqs-per-batch", "4",
                  "--min-len", "8", "--max-len", "20", "--timing-batches", "1", "--reference-seqs", "2",
                  "--device", "cpu", "--plot", str(plot), "--json", str(results)])
    assert plot.stat().st_size > 1000
    report = json.loads(results.read_text())
    assert report["steps"] == 12 and 0.0 <= report["final_accuracy"] <= 1.0
    for key in ("packed_tokens_per_s", "padded_tokens_per_s", "fused_scan_tokens_per_s", "reference_scan_tokens_per_s"):
        assert report[key] > 0, key
    assert report["padded_to_real_tokens"] > 1.0  # the lengths vary, so padding adds tokens


def test_example_batches_are_what_the_tasks_say():
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "train_packed.py")
    spec = importlib.util.spec_from_file_location("train_packed", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    g = torch.Generator().manual_seed(0)
    batch = example.selective_copying_batch(6, 8, 30, 3, 5, g)
    for s, e in _segments(batch.cu_seqlens):
        ids, targets = batch.ids[s:e], batch.targets[s:e]
        data = ids[ids >= 2]
        assert data.numel() == 3 and torch.equal(ids[-3:], torch.full((3,), example.MARKER))
        assert torch.equal(targets[-3:], data) and (targets[:-3] == example.IGNORE).all()
    batch = example.induction_batch(6, 8, 30, 5, g)
    for s, e in _segments(batch.cu_seqlens):
        ids, targets = batch.ids[s:e], batch.targets[s:e]
        trigger = (ids == example.MARKER).nonzero().flatten()
        assert trigger.numel() == 2 and trigger[1] == e - s - 1
        assert targets[-1] == ids[trigger[0] + 1] and (targets[:-1] == example.IGNORE).all()
    ids, targets = example.padded(batch)
    assert torch.equal(ids[targets != example.IGNORE], batch.ids[batch.targets != example.IGNORE])


@pytest.mark.parametrize("packed", [False, True], ids=["rows", "packed"])
def test_prefill_then_step_equals_forward(device, packed):
    """Prompts run through forward (packed or as rows) fill the cache; steps continue them."""
    model = MambaLM(vocab_size=11, d_model=16, n_layer=2, d_state=4, device=device).to(F64).eval()
    for layer in model.backbone.layers:
        _random_trained_like(layer.mixer)
    prompt_lengths, new_tokens = ((2, 7, 4) if packed else (6, 6, 6)), 5
    full = [torch.randint(0, 11, (n + new_tokens,), device=device) for n in prompt_lengths]
    cache = model.allocate_inference_cache(batch_size=3)
    with torch.no_grad():
        if packed:
            prompts = torch.cat([seq[:n] for seq, n in zip(full, prompt_lengths)])[None]
            model(prompts, cu_seqlens=make_offsets(prompt_lengths, torch.int32, device), inference_cache=cache)
        else:
            model(torch.stack([seq[:n] for seq, n in zip(full, prompt_lengths)]), inference_cache=cache)
        for t in range(new_tokens):
            ids = torch.stack([seq[n + t] for seq, n in zip(full, prompt_lengths)])[:, None]
            logits = model.step(ids, cache)[:, 0]
            for row, (seq, n) in enumerate(zip(full, prompt_lengths)):
                want = model(seq[None, : n + t + 1])[0, -1]
                torch.testing.assert_close(logits[row], want)


def test_docstring_examples_run():
    import doctest

    from torch_parprims.nn import conv, lm, mamba

    for module in (conv, mamba, lm):
        result = doctest.testmod(module, raise_on_error=False, verbose=False)
        assert result.attempted > 0 and result.failed == 0, module.__name__


def test_mamba_in_bfloat16_keeps_A_log_and_D_in_float32(device):
    """mamba-ssm's mixed precision: bf16 weights and activations, A_log and D (and the decode
    state) in float32; the output is close to the float32 block's."""
    exact = _random_trained_like(Mamba(d_model=32, d_state=8, device=device))
    half = Mamba(d_model=32, d_state=8, device=device, dtype=torch.bfloat16)
    half.load_state_dict(exact.state_dict())
    assert half.A_log.dtype == half.D.dtype == torch.float32 and half.in_proj.weight.dtype == torch.bfloat16
    x, offsets = torch.randn(1, 40, 32, device=device), make_offsets((15, 25), torch.int32, device)
    out = half(x.bfloat16(), cu_seqlens=offsets)
    assert out.dtype == torch.bfloat16
    want = exact(x, cu_seqlens=offsets)
    assert (out.float() - want).abs().max() <= 0.05 * want.abs().max()
    out.float().square().sum().backward()
    assert half.A_log.grad.dtype == torch.float32 and half.in_proj.weight.grad.dtype == torch.bfloat16
    conv_state, ssm_state = half.allocate_inference_cache(batch_size=2)
    assert conv_state.dtype == torch.bfloat16 and ssm_state.dtype == torch.float32
    assert half.step(torch.randn(2, 1, 32, device=device, dtype=torch.bfloat16), conv_state, ssm_state)[0].dtype \
        == torch.bfloat16
