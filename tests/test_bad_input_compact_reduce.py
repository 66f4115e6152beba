"""Every argument check of compaction, the offsets helpers, the reductions and the histogram
names the argument (RuntimeError from the kernels' checks, TypeError from the Python
wrappers')."""
import pytest
import torch

import torch_parprims as pp

from helpers import check_bad_case, other_device, raises

_ops = torch.ops.parprims


# ---- compaction and the offsets helpers ------------------------------------------------------


# (a call given the device, the expected message)
COMPACT_CASES = {
    "mask_float": (lambda dev: pp.compact(torch.randn(3, 4, device=dev), torch.ones(3, 4, device=dev)),
                   r"^mask: expected a torch\.bool tensor, got torch\.float32$"),
    "mask_int_capacity": (lambda dev: pp.compact(torch.randn(5, device=dev), torch.ones(5, dtype=torch.int64, device=dev),
                                                 capacity=2), r"^mask: expected a torch\.bool tensor, got torch\.int64$"),
    "mask_shape": (lambda dev: pp.compact(torch.randn(3, 4, device=dev), torch.ones(4, 3, dtype=torch.bool, device=dev)),
                   r"^mask: expected x's shape \[3, 4\] \(elementwise\) or \[3\] \(x's size along dim 0\), "
                   r"got shape \[4, 3\]$"),
    "mask_shape_dim1": (lambda dev: pp.compact(torch.randn(3, 4, device=dev), torch.ones(3, dtype=torch.bool, device=dev),
                                               1, capacity=3),
                        r"^mask: expected x's shape \[3, 4\] \(elementwise\) or \[4\] \(x's size along dim 1\)"),
    "bad_dim": (lambda dev: pp.compact(torch.randn(3, 4, device=dev), torch.ones(4, dtype=torch.bool, device=dev), 2),
                r"^dim: expected a dimension in \[-2, 1\]"),
    "bad_dim_elementwise": (lambda dev: pp.compact(torch.randn(4, device=dev), torch.ones(4, dtype=torch.bool, device=dev),
                                                   3, capacity=2), r"^dim: expected a dimension in \[-1, 0\]"),
    "negative_capacity": (lambda dev: pp.compact(torch.randn(3, device=dev), torch.ones(3, dtype=torch.bool, device=dev),
                                                 capacity=-1),
                          r"^capacity: expected a non-negative number of slots, got -1$"),
    "segmented_mask_shape": (lambda dev: pp.segmented_compact(torch.randn(10, 2, device=dev),
                                                              torch.ones(10, 2, dtype=torch.bool, device=dev),
                                                              torch.tensor([0, 10], device=dev)),
                             r"^mask: expected shape \[10\] \(x's packed length\), got shape \[10, 2\]$"),
    "pad_indices_dtype": (lambda dev: pp.pad(torch.randn(3, 2, device=dev), torch.zeros(3, device=dev), 2, 2),
                          r"^indices: expected an int64 or int32 tensor, got torch\.float32$"),
    "pad_indices_shape": (lambda dev: pp.pad(torch.randn(3, 2, device=dev), torch.zeros(4, dtype=torch.int64, device=dev),
                                             2, 2), r"^indices: expected shape \[3\] \(one per row of x\), got shape \[4\]$"),
    "pad_negative_batch": (lambda dev: pp.pad(torch.randn(3, 2, device=dev), torch.zeros(3, dtype=torch.int64, device=dev),
                                              -1, 2), r"^batch, seqlen: expected non-negative sizes, got -1 and 2$"),
    "lengths_float": (lambda dev: pp.offsets_from_lengths(torch.ones(3, device=dev)),
                      r"^lengths: expected an int32 or int64 tensor, got torch\.float32$"),
    "lengths_2d": (lambda dev: pp.offsets_from_lengths(torch.ones(2, 3, dtype=torch.int64, device=dev)),
                   r"^lengths: expected a 1-D tensor of sequence lengths, got shape \[2, 3\]$"),
    "lengths_out_dtype": (lambda dev: pp.offsets_from_lengths(torch.ones(3, dtype=torch.int64, device=dev), torch.float32),
                          r"^dtype: expected torch\.int32 or torch\.int64, got torch\.float32$"),
    "flags_int": (lambda dev: pp.offsets_from_flags(torch.ones(4, dtype=torch.int64, device=dev)),
                  r"^flags: expected a torch\.bool tensor, got torch\.int64$"),
    "flags_2d": (lambda dev: pp.offsets_from_flags(torch.ones(2, 2, dtype=torch.bool, device=dev), 3),
                 r"^flags: expected a 1-D tensor, got shape \[2, 2\]$"),
    "flags_negative_capacity": (lambda dev: pp.offsets_from_flags(torch.ones(4, dtype=torch.bool, device=dev), -2),
                                r"^capacity: expected a non-negative number of slots, got -2$"),
    "lengths_from_float_offsets": (lambda dev: pp.lengths_from_offsets(torch.tensor([0.0, 2.0], device=dev)),
                                   r"^offsets: expected an int32 or int64 tensor, got torch\.float32$"),
    "flags_from_offsets_total": (lambda dev: pp.flags_from_offsets(torch.tensor([0], device=dev), -1),
                                 r"^total: expected a non-negative length, got -1$"),
}


@pytest.mark.parametrize("case", list(COMPACT_CASES))
def test_compact_family_bad_arguments(case, device):
    check_bad_case(COMPACT_CASES, case, device)


def test_compact_mask_on_another_device(device):
    other = other_device(device)
    with raises(r"^mask: expected a tensor on " + device):
        pp.compact(torch.randn(4, device=device), torch.ones(4, dtype=torch.bool, device=other))
    with raises(r"^indices: expected a tensor on " + device):
        pp.pad(torch.randn(2, 3, device=device), torch.zeros(2, dtype=torch.int64, device=other), 1, 2)


def test_compact_family_python_type_errors(device):
    x = torch.randn(4, device=device)
    with pytest.raises(TypeError, match=r"^mask: expected a torch.Tensor, got list"):
        pp.compact(x, [True, False, True, True])
    with pytest.raises(TypeError, match=r"^capacity: expected an int or None, got float"):
        pp.compact(x, x > 0, capacity=2.0)
    with pytest.raises(TypeError, match=r"^return_indices: expected a bool, got int"):
        pp.compact(x, x > 0, return_indices=1)
    with pytest.raises(TypeError, match=r"^attention_mask: expected a bool or integer tensor, got torch.float32"):
        pp.unpad(torch.randn(2, 3, 4, device=device), torch.ones(2, 3, device=device))
    with pytest.raises(ValueError, match=r"^attention_mask: expected shape \(batch, seqlen\) = \(2, 3\)"):
        pp.unpad(torch.randn(2, 3, 4, device=device), torch.ones(3, 2, dtype=torch.bool, device=device))


def test_negative_lengths_rejected(device):
    if device.startswith("cuda"):
        pp.set_checks(True)
    with raises(r"^lengths: expected non-negative lengths$"):
        pp.offsets_from_lengths(torch.tensor([2, -1, 3], device=device))


# ---- reductions and histograms ------------------------------------------------------------


@pytest.mark.parametrize("op", ("add", "SUM", "", "argmax"))
def test_reduction_bad_op_name(op, device):
    x = torch.randn(2, 5, device=device)
    pattern = r"^op: expected one of 'sum', 'mean', 'max', 'min', 'prod', 'logsumexp', got '" + op + "'"
    with raises(pattern):
        pp.segment_reduce(x, torch.tensor([0, 2], device=device), op)
    with raises(pattern):
        pp.reduce(x, 1, op)


@pytest.mark.parametrize("op,dtype,pattern", [
    ("mean", torch.int64, r"^x: ops 'mean' and 'logsumexp' expect a floating tensor .*got torch\.int64$"),
    ("logsumexp", torch.bool, r"^x: ops 'mean' and 'logsumexp' expect a floating tensor .*got torch\.bool$"),
    ("sum", torch.complex64, r"^x: ops 'sum', 'max', 'min' and 'prod' expect .*got torch\.complex64$"),
    ("max", torch.int8, r"^x: ops 'sum', 'max', 'min' and 'prod' expect .*got torch\.int8$"),
])
def test_reduction_bad_dtype_for_op(op, dtype, pattern, device):
    x = torch.ones(4, 3, dtype=dtype, device=device)
    with raises(pattern):
        pp.segment_reduce(x, torch.tensor([0, 4], device=device), op)
    with raises(pattern):
        pp.reduce(x, 0, op)


def test_reduction_bad_dim_and_shapes(device):
    x = torch.randn(4, 3, device=device)
    with raises(r"^dim: expected a dimension in \[-2, 1\].*got 2"):
        pp.segment_reduce(x, torch.tensor([0, 4], device=device), "sum", 2)
    with raises(r"^dim: expected a dimension in \[-2, 1\].*got -3"):
        pp.reduce(x, -3, "sum")
    with raises(r"^x: expected at least one dimension"):
        pp.segment_reduce(x[0, 0], torch.tensor([0, 1], device=device), "sum")


def test_reduce_bad_mask(device):
    x = torch.randn(4, 3, device=device)
    with raises(r"^mask: expected a torch\.bool tensor, got torch\.float32$"):
        pp.reduce(x, 0, "mean", torch.ones(4, 3, device=device))
    with raises(r"^mask: expected a shape broadcastable to x's \[4, 3\], got \[4\]$"):
        pp.reduce(x, 0, "mean", torch.ones(4, dtype=torch.bool, device=device))
    with raises(r"^mask: expected a shape broadcastable"):
        pp.reduce(x, 0, "mean", torch.ones(2, 4, 3, dtype=torch.bool, device=device))
    with pytest.raises(TypeError, match=r"^mask: expected a torch.Tensor, got list"):
        pp.reduce(x, 0, "mean", [[True] * 3] * 4)
    with pytest.raises(TypeError, match=r"^keepdim: expected a bool, got int"):
        pp.reduce(x, 0, "mean", keepdim=1)


def test_reduce_mask_on_another_device(device):
    x = torch.randn(4, 3, device=device)
    mask = torch.ones(4, 3, dtype=torch.bool, device=other_device(device))
    with raises(r"^mask: expected a tensor on "):
        pp.reduce(x, 0, "sum", mask)


def test_histogram_bad_arguments(device):
    x = torch.randn(10, device=device)
    with raises(r"^x: expected a floating tensor \(float16, bfloat16, float32, float64\), got torch\.int64$"):
        pp.histogram(x.long(), 4, (0.0, 1.0))
    with raises(r"^bins: expected a positive number of bins, got 0$"):
        pp.histogram(x, 0, (0.0, 1.0))
    with raises(r"^range: expected finite \(lo, hi\) with lo < hi, got \(1, 1\)$"):
        pp.histogram(x, 4, (1.0, 1.0))
    with raises(r"^range: expected finite \(lo, hi\)"):
        pp.histogram(x, 4, (0.0, float("inf")))
    with raises(r"^weights: expected a floating tensor .*got torch\.int32$"):
        pp.histogram(x, 4, (0.0, 1.0), torch.ones(10, dtype=torch.int32, device=device))
    with raises(r"^weights: expected x's shape \[10\], got \[9\]$"):
        pp.histogram(x, 4, (0.0, 1.0), torch.ones(9, device=device))
    with raises(r"^x: histograms per sequence \(offsets\) take a 1-D packed x, got shape \[2, 5\]$"):
        pp.histogram(x.view(2, 5), 4, (0.0, 1.0), offsets=torch.tensor([0, 10], device=device))
    with pytest.raises(TypeError, match=r"^range: expected a pair of numbers \(lo, hi\), got 1.0$"):
        pp.histogram(x, 4, 1.0)
    with pytest.raises(TypeError, match=r"^bins: expected an int, got float$"):
        pp.histogram(x, 4.0, (0.0, 1.0))
    with pytest.raises(TypeError, match=r"^weights: expected a torch.Tensor, got list"):
        pp.histogram(x, 4, (0.0, 1.0), [1.0] * 10)
