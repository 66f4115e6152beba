"""An output that the loss does not read costs the backward nothing.

Autograd hands a backward zeros for every output that got no gradient unless the op says
otherwise. For the ops here those outputs are large: selective_scan's saved checkpoints are as
big as its output, and a max scan's or a compaction's int64 indices are twice the size of
float32 values. Each op's backward takes None for them instead; these tests watch every
``aten.zeros`` of the backward and check that the gradients are still right.
"""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import torch_parprims as pp

from helpers import assert_close


class _ZerosLog(TorchDispatchMode):
    """The shapes of every tensor made by ``aten.zeros`` while active (autograd's way to
    materialize a missing gradient)."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.zeros.default:
            self.shapes.append(tuple(out.shape))
        return out


def _grads_without_zeros(outputs, used, inputs, forbidden_shapes):
    """Gradients of sum(w * outputs[used]) for `inputs`, asserting that no zeros of a
    forbidden shape were made during the backward."""
    out = outputs[used]
    weight = torch.randn_like(out)
    with _ZerosLog() as log:
        grads = torch.autograd.grad(out, inputs, weight)
    made = [s for s in log.shapes if s in forbidden_shapes]
    assert not made, f"the backward materialized zeros of shape(s) {made} for unused outputs"
    return grads, weight


def test_selective_scan_checkpoints_and_last_state(device):
    b, d, L, n = 2, 5, 37, 4
    u, delta, z = (torch.randn(b, d, L, device=device, dtype=torch.float64, requires_grad=True) for _ in range(3))
    A = (-torch.rand(d, n, device=device, dtype=torch.float64)).requires_grad_()
    B, C = (torch.randn(b, n, L, device=device, dtype=torch.float64, requires_grad=True) for _ in range(2))
    inputs = (u, delta, A, B, C, z)
    out, last = pp.selective_scan(u, delta, A, B, C, z=z, delta_softplus=True)
    checkpoint_shapes = {(b, d, L // 16 + 1, n), (b, d, (L + 15) // 16, n)}
    grads, weight = _grads_without_zeros((out, last), 0, inputs, checkpoint_shapes | {tuple(last.shape)})
    # the same gradients when last_state is read with a zero weight
    out2, last2 = pp.selective_scan(u, delta, A, B, C, z=z, delta_softplus=True)
    want = torch.autograd.grad((out2 * weight).sum() + (last2 * 0).sum(), inputs)
    for g, w in zip(grads, want):
        assert_close(g, w)


def test_selective_scan_last_state_alone(device):
    b, d, L, n = 1, 3, 20, 2
    u, delta = (torch.randn(b, d, L, device=device, dtype=torch.float64, requires_grad=True) for _ in range(2))
    A = -torch.rand(d, n, device=device, dtype=torch.float64)
    B, C = (torch.randn(b, n, L, device=device, dtype=torch.float64) for _ in range(2))
    out, last = pp.selective_scan(u, delta, A, B, C)
    grads, weight = _grads_without_zeros((out, last), 1, (u, delta), {(b, d, L)})
    out2, last2 = pp.selective_scan(u, delta, A, B, C)
    want = torch.autograd.grad((last2 * weight).sum() + (out2 * 0).sum(), (u, delta))
    for g, w in zip(grads, want):
        assert_close(g, w)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("packed", [False, True])
def test_max_min_scan_index(device, op, packed):
    x = torch.randn(6, 300, device=device, dtype=torch.float64, requires_grad=True)
    if packed:
        offsets = torch.tensor([0, 100, 100, 299, 300], device=device)
        y = pp.segmented_scan(x, offsets, dim=1, op=op)
    else:
        y = pp.scan(x, dim=1, op=op)
    (grad,), weight = _grads_without_zeros((y,), 0, (x,), {tuple(x.shape)})
    # every output's gradient lands on the position its value came from
    ref = x.detach().clone().requires_grad_()
    if packed:
        parts = [torch.cummax(p, 1)[0] if op == "max" else torch.cummin(p, 1)[0]
                 for p in ref.split([100, 0, 199, 1], dim=1)]
        want_y = torch.cat(parts, 1)
    else:
        want_y = torch.cummax(ref, 1)[0] if op == "max" else torch.cummin(ref, 1)[0]
    (want,) = torch.autograd.grad(want_y, ref, weight)
    assert_close(grad, want)


@pytest.mark.parametrize("capacity", [None, 150])
def test_compact_indices(device, capacity):
    x = torch.randn(400, 3, device=device, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(400, device=device) < 0.5
    kept = int(mask.sum())
    if capacity is None:
        values, indices = pp.compact(x, mask, return_indices=True)
        outputs, count_shape = (values, indices), ()
    else:
        values, count, indices = pp.compact(x, mask, capacity=capacity, return_indices=True)
        outputs, count_shape = (values, count, indices), tuple(count.shape)
    (grad,), weight = _grads_without_zeros(outputs, 0, (x,), {tuple(indices.shape), count_shape})
    want = torch.zeros_like(x)
    rows = min(kept, capacity or kept)
    want[mask.nonzero().squeeze(1)[:rows]] = weight[:rows]
    assert_close(grad, want)


@pytest.mark.parametrize("packed", [False, True])
def test_affine_scan_final_state_alone(device, packed):
    a = torch.rand(4, 50, device=device, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 50, device=device, dtype=torch.float64, requires_grad=True)
    offsets = torch.tensor([0, 20, 20, 50], device=device) if packed else None
    h, final = pp.affine_scan(a, b, offsets=offsets)
    grads, weight = _grads_without_zeros((h, final), 1, (a, b), {tuple(b.shape)})
    h2, final2 = pp.affine_scan(a, b, offsets=offsets)
    want = torch.autograd.grad((final2 * weight).sum() + (h2 * 0).sum(), (a, b))
    for g, w in zip(grads, want):
        assert_close(g, w)
