"""selective_scan's argument checks: every bad argument raises a RuntimeError whose message
starts with the argument's name (shapes, dtypes, ranks, groups, initial state, cu_seqlens,
devices)."""
import pytest
import torch

import torch_parprims as pp


def t(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


_b, _d, _L, _n = 2, 4, 10, 3
_PACKED = lambda: dict(u=t(1, _d, _L), delta=t(1, _d, _L), B=t(1, _n, _L), C=t(1, _n, _L), z=None)

# (id, changes to the arguments of a good call, message pattern)
BAD_CASES = [
    ("u_rank", lambda: dict(u=t(_b, _d)), r"^u: expected shape \(batch, dim, L\)"),
    ("u_int", lambda: dict(u=torch.ones(_b, _d, _L, dtype=torch.int32)), r"^u: expected torch.float32"),
    ("delta_shape", lambda: dict(delta=t(_b, _d, _L + 1)), r"^delta: expected u's shape"),
    ("delta_dtype", lambda: dict(delta=t(_b, _d, _L, dtype=torch.bfloat16)), r"^delta: expected u's dtype"),
    ("z_shape", lambda: dict(z=t(_b, _d + 1, _L)), r"^z: expected u's shape"),
    ("z_dtype", lambda: dict(z=t(_b, _d, _L, dtype=torch.float64)), r"^z: expected u's dtype"),
    ("A_shape", lambda: dict(A=t(_d + 1, _n)), r"^A: expected shape \(dim, N\)"),
    ("A_rank", lambda: dict(A=t(_d)), r"^A: expected shape \(dim, N\)"),
    ("A_float16", lambda: dict(A=t(_d, _n, dtype=torch.float16)), r"^A: expected torch.float32"),
    ("B_length", lambda: dict(B=t(_b, _n, _L + 1)), r"^B: expected shape \(batch, N, L\)"),
    ("B_state", lambda: dict(B=t(_b, _n + 1, _L)), r"^B: expected shape \(batch, N, L\)"),
    ("B_const_shape", lambda: dict(B=t(_d, _n + 1)), r"^B: expected shape \[4, 3\] \(dim, N\)"),
    ("B_rank", lambda: dict(B=t(1, _b, 1, _n, _L)), r"^B: expected \(dim, N\), \(batch, N, L\) or \(batch, G, N, L\)"),
    ("B_dtype", lambda: dict(B=t(_b, _n, _L, dtype=torch.float16)), r"^B: a variable B has u's dtype"),
    ("C_shape", lambda: dict(C=t(_b + 1, _n, _L)), r"^C: expected shape \(batch, N, L\)"),
    ("groups", lambda: dict(B=t(_b, 3, _n, _L), C=t(_b, 3, _n, _L)), r"^B: expected a number of groups G that divides dim"),
    ("groups_differ", lambda: dict(B=t(_b, 2, _n, _L), C=t(_b, 4, _n, _L)), r"^B, C: expected the same number of groups"),
    ("D_shape", lambda: dict(D=t(_d + 1)), r"^D: expected shape"),
    ("D_int", lambda: dict(D=torch.ones(_d, dtype=torch.int64)), r"^D: expected a floating tensor"),
    ("delta_bias_shape", lambda: dict(delta_bias=t(1, _d)), r"^delta_bias: expected shape"),
    ("initial_state_shape", lambda: dict(initial_state=t(_b, _d, _n + 1)),
     r"^initial_state: expected shape .*\(batch, dim, N\)"),
    ("initial_state_packed", lambda: dict(_PACKED(), initial_state=t(1, _d, _n), cu_seqlens=torch.tensor([0, 4, 10])),
     r"^initial_state: expected shape .*\(number of sequences, dim, N\)"),
    ("cu_seqlens_batch", lambda: dict(cu_seqlens=torch.tensor([0, 4, 10])),
     r"^cu_seqlens: packed sequences lie along L of a batch of 1, got batch = 2"),
    ("cu_seqlens_dtype", lambda: dict(_PACKED(), cu_seqlens=torch.tensor([0.0, 4.0, 10.0])),
     r"^cu_seqlens: expected an int32 or int64"),
    ("cu_seqlens_end", lambda: dict(_PACKED(), cu_seqlens=torch.tensor([0, 4, 9])), r"^cu_seqlens: expected .*10"),
]


def _bad_params():
    return [pytest.param(changes, pattern, id=name) for name, changes, pattern in BAD_CASES]


@pytest.mark.parametrize("changes,pattern", _bad_params())
def test_bad_input(changes, pattern, device):
    """Each bad argument raises a RuntimeError whose message starts with the argument's name."""
    args = dict(u=t(_b, _d, _L), delta=torch.rand(_b, _d, _L), A=-torch.rand(_d, _n), B=t(_b, _n, _L),
                C=t(_b, _n, _L), D=t(_d), z=t(_b, _d, _L), delta_bias=t(_d), delta_softplus=True,
                initial_state=None, cu_seqlens=None)
    args.update(changes())
    args = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    pp.set_checks(True)  # CUDA validates offsets' values only with checks on (it would sync)
    with pytest.raises(RuntimeError, match=pattern):
        pp.selective_scan(**args)


@pytest.mark.parametrize("offsets", (torch.tensor([0.0, 4.0, 10.0]), torch.tensor([0, 4, 9]), torch.tensor([1, 4, 10])))
def test_bad_cu_seqlens_raises(offsets, device):
    """Bad offsets raise a RuntimeError that names cu_seqlens."""
    d, L, n = 4, 10, 3
    pp.set_checks(True)  # CUDA validates offsets' values only with checks on (it would sync)
    with pytest.raises(RuntimeError, match=r"^cu_seqlens: expected"):
        pp.selective_scan(torch.randn(1, d, L, device=device), torch.rand(1, d, L, device=device),
                          -torch.rand(d, n, device=device), torch.randn(1, n, L, device=device),
                          torch.randn(1, n, L, device=device), cu_seqlens=offsets.to(device))


def test_device_mismatch(device):
    if not device.startswith("cuda"):
        pytest.skip("a device mismatch needs a CUDA device")
    d, L, n = 4, 10, 3
    u = torch.randn(1, d, L, device=device)
    with pytest.raises(RuntimeError, match=r"^A: expected a tensor on"):
        pp.selective_scan(u, torch.rand_like(u), -torch.rand(d, n), torch.randn(1, n, L, device=device),
                          torch.randn(1, n, L, device=device))
