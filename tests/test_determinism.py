"""Under torch.use_deterministic_algorithms(True) every op is bitwise reproducible, on long
rows of many tiles too (where the default mode may round differently between runs)."""
import pytest
import torch

import torch_parprims as pp


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


@pytest.mark.parametrize("op", ("add", "mul", "logaddexp"))
def test_long_scan_is_reproducible(op, device, deterministic):
    x = torch.randn(3, (1 << 18) + 3, device=device)
    if op == "mul":
        x = 1 + 1e-3 * x
    first = pp.scan(x, 1, op)
    for _ in range(3):
        assert torch.equal(pp.scan(x, 1, op), first)


def test_long_affine_rows_are_reproducible(device, deterministic):
    """Few long rows (cut into spans on CUDA)."""
    a = 0.5 + 0.5 * torch.rand(3, (1 << 18) + 5, device=device)
    b = torch.randn(3, (1 << 18) + 5, device=device)
    h, last = pp.affine_scan(a, b, -1, reverse=True)
    for _ in range(3):
        h2, last2 = pp.affine_scan(a, b, -1, reverse=True)
        assert torch.equal(h2, h) and torch.equal(last2, last)


def test_long_columns_and_packed_are_reproducible(device, deterministic):
    b = torch.randn(20000, 64, device=device)
    a = torch.rand(20000, 64, device=device)
    offsets = torch.tensor([0, 7000, 7000, 19999, 20000], device=device)
    h, last = pp.affine_scan(a, b, 0, None, offsets)
    for _ in range(3):
        h2, last2 = pp.affine_scan(a, b, 0, None, offsets)
        assert torch.equal(h2, h) and torch.equal(last2, last)
    y = pp.segmented_scan(b, offsets, 0)
    assert torch.equal(pp.segmented_scan(b, offsets, 0), y)


def test_deterministic_backward_passes_strict_gradcheck(device, deterministic):
    x = torch.randn(2, 5000, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: pp.scan(t, 1, "add", False, True), (x,), fast_mode=True)
