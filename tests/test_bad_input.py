"""Every argument check names the argument: RuntimeError from the kernels' checks, TypeError
from the Python wrappers' (a non-tensor where a tensor is expected, a non-bool switch, both
offsets and cu_seqlens). Scans, offsets, the affine recurrences and the wrappers here;
compaction and the reductions in test_bad_input_compact_reduce.py."""
import numpy as np
import pytest
import torch

import torch_parprims as pp

from helpers import assert_close, check_bad_case, other_device, raises

_ops = torch.ops.parprims


# ---- scans -------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", (2, -3, 100))
def test_scan_bad_dim(dim, device):
    x = torch.randn(3, 4, device=device)
    with raises(r"^dim: expected a dimension in \[-2, 1\].*got " + str(dim)):
        pp.scan(x, dim)
    with raises(r"^dim: expected a dimension"):
        pp.segmented_scan(x, torch.tensor([0, 3], device=device), dim)
    with raises(r"^dim: expected a dimension"):
        _ops._scan_with_indices(x, None, dim, "max")
    with raises(r"^dim: expected a dimension"):
        _ops._scan_bicyclic(x.long(), x.long(), None, dim)


@pytest.mark.parametrize("op,dtype,pattern", [
    ("mul", torch.int32, r"^x: ops 'mul' and 'logaddexp' expect a floating"),
    ("mul", torch.bool, r"^x: ops 'mul' and 'logaddexp' expect a floating"),
    ("mul", torch.complex64, r"^x: ops 'mul' and 'logaddexp' expect a floating"),
    ("logaddexp", torch.int64, r"^x: ops 'mul' and 'logaddexp' expect a floating"),
    ("max", torch.complex64, r"^x: ops 'max' and 'min' expect"),
    ("min", torch.complex128, r"^x: ops 'max' and 'min' expect"),
    ("add", torch.int16, r"^x: op 'add' expects a floating, complex, int32, int64 or bool"),
    ("add", torch.uint8, r"^x: op 'add' expects"),
    ("max", torch.int8, r"^x: ops 'max' and 'min' expect"),
])
def test_scan_bad_dtype_for_op(op, dtype, pattern, device):
    x = torch.ones(2, 5, dtype=dtype, device=device)
    with raises(pattern):
        pp.scan(x, 1, op)
    with raises(pattern):
        pp.segmented_scan(x, torch.tensor([0, 2, 5], device=device), 1, op)


@pytest.mark.parametrize("op", ("sum", "ADD", "", "max "))
def test_scan_bad_op_name(op, device):
    x = torch.randn(2, 5, device=device)
    with raises(r"^op: expected one of 'add', 'mul', 'max', 'min', 'logaddexp', got '" + op):
        pp.scan(x, 1, op)
    with raises(r"^op: expected one of"):
        pp.segmented_scan(x, torch.tensor([0, 5], device=device), 1, op)


def test_scan_with_indices_bad_op_and_dtype(device):
    x = torch.randn(2, 5, device=device)
    with raises(r"^op: scans with indices take 'max' or 'min', got 'add'"):
        _ops._scan_with_indices(x, None, 1, "add")
    with raises(r"^x: scans with indices expect a floating tensor"):
        _ops._scan_with_indices(x.long(), None, 1, "max")


@pytest.mark.parametrize("call,pattern", [
    (lambda dev: pp.scan(torch.ones(2, 5, dtype=torch.int32, device=dev), 1, "mul"), r"got torch\.int32$"),
    (lambda dev: pp.scan(torch.ones(2, 5, dtype=torch.complex64, device=dev), 1, "max"), r"got torch\.complex64$"),
    (lambda dev: pp.scan(torch.ones(2, 5, dtype=torch.uint8, device=dev), 1, "add"), r"got torch\.uint8$"),
    (lambda dev: pp.scan(torch.ones(2, 5, dtype=torch.bool, device=dev), 1, "logaddexp"), r"got torch\.bool$"),
    (lambda dev: _ops._scan_with_indices(torch.ones(2, 5, dtype=torch.int64, device=dev), None, 1, "max"),
     r"^x: scans with indices expect a floating tensor, got torch\.int64$"),
    (lambda dev: pp.affine_scan(*(t.to(torch.complex128) for t in _ab(dev)), -1,
                                _zeros(2, 3, dtype=torch.complex64, device=dev)),
     r"^initial_state: expected dtype torch\.complex128 \(b's\), got torch\.complex64$"),
], ids=["int32", "complex64", "uint8", "bool", "with_indices", "complex_state"])
def test_dtypes_spelled_as_torch_does(call, pattern, device):
    """Messages name dtypes as torch spells them (torch.float32), never by their C++ names."""
    with raises(pattern):
        call(device)


def test_bicyclic_bad_arguments(device):
    p = torch.randint(0, 3, (2, 5), device=device)
    with raises(r"^p, q: expected torch.int64 tensors, got torch.int32 and torch.int64"):
        _ops._scan_bicyclic(p.int(), p, None, 1)
    with raises(r"^p, q: expected the same shape"):
        _ops._scan_bicyclic(p, p[:, :4], None, 1)
    with raises(r"^p: expected at least one dimension"):
        _ops._scan_bicyclic(p[0, 0], p[0, 0], None, 0)


# ---- offsets -----------------------------------------------------------------------------

# (a call taking offsets for data whose packed dimension has length 10)
OFFSETS_CALLS = {
    "segmented_scan": lambda o, dev: pp.segmented_scan(torch.randn(10, 2, device=dev), o, 0),
    "scan_with_indices": lambda o, dev: _ops._scan_with_indices(torch.randn(2, 10, device=dev), o, 1, "max"),
    "bicyclic": lambda o, dev: _ops._scan_bicyclic(*torch.randint(0, 3, (2, 1, 10), device=dev), o, 1),
    "affine_scan": lambda o, dev: pp.affine_scan(torch.rand(2, 10, device=dev), torch.randn(2, 10, device=dev), 1,
                                                 offsets=o),
    "affine_scan_exclusive": lambda o, dev: _ops._affine_scan_exclusive(
        torch.rand(10, device=dev), torch.randn(10, device=dev), 0, None, o, True, False),
    "matrix_affine_scan": lambda o, dev: pp.matrix_affine_scan(
        torch.randn(10, 2, 2, device=dev), torch.randn(10, 2, device=dev), offsets=o),
    "segmented_compact": lambda o, dev: pp.segmented_compact(
        torch.randn(10, 2, device=dev), torch.rand(10, device=dev) > 0.5, o),
    "segmented_compact_capacity": lambda o, dev: pp.segmented_compact(
        torch.randn(10, device=dev), torch.rand(10, device=dev) > 0.5, o, 4),
    "segment_reduce": lambda o, dev: pp.segment_reduce(torch.randn(2, 10, device=dev), o, "max", 1),
    "histogram": lambda o, dev: pp.histogram(torch.randn(10, device=dev), 4, (0.0, 1.0), offsets=o),
}


@pytest.mark.parametrize("call", list(OFFSETS_CALLS))
@pytest.mark.parametrize("offsets,pattern", [
    (torch.tensor([0.0, 4.0, 10.0]), r"^offsets: expected an int32 or int64 tensor, got torch\.float32$"),
    (torch.tensor([0, 4, 10], dtype=torch.int16), r"^offsets: expected an int32 or int64 tensor, got torch\.int16$"),
    (torch.tensor([[0, 4, 10]]), r"^offsets: expected a 1-D tensor of length num_sequences \+ 1"),
    (torch.zeros(0, dtype=torch.int64), r"^offsets: expected a 1-D tensor of length num_sequences \+ 1"),
    (torch.tensor(0), r"^offsets: expected a 1-D tensor"),
], ids=["float", "int16", "2d", "empty", "0d"])
def test_offsets_bad_dtype_or_shape(call, offsets, pattern, device):
    with raises(pattern):
        OFFSETS_CALLS[call](offsets.to(device), device)


BAD_VALUES = [
    ([1, 4, 10], r"^offsets: expected offsets\[0\] == 0, got 1"),
    ([-2, 4, 10], r"^offsets: expected offsets\[0\] == 0, got -2"),
    ([0, 6, 4, 10], r"^offsets: expected non-decreasing values, got offsets\[1\] = 6 > offsets\[2\] = 4$"),
    ([0, 4, 11], r"^offsets: expected offsets\[-1\] == 10 .*got 11"),
    ([0, 4, 9], r"^offsets: expected offsets\[-1\] == 10 .*got 9"),
    ([0, 40, 10], r"^offsets: expected non-decreasing values, got offsets\[1\] = 40 > offsets\[2\] = 10$"),
    ([0], r"^offsets: expected offsets\[-1\] == 10 .*got 0"),
]


@pytest.mark.parametrize("call", list(OFFSETS_CALLS))
@pytest.mark.parametrize("values,pattern", BAD_VALUES, ids=["first1", "first_neg", "decreasing", "last_big",
                                                            "last_small", "middle_oob", "no_sequences"])
@pytest.mark.parametrize("odtype", (torch.int32, torch.int64))
def test_offsets_bad_values(call, values, pattern, odtype, device):
    if device.startswith("cuda"):
        pp.set_checks(True)  # CPU ops always validate; CUDA ops when asked (reset by conftest)
    with raises(pattern):
        OFFSETS_CALLS[call](torch.tensor(values, dtype=odtype, device=device), device)


@pytest.mark.parametrize("values,pattern", BAD_VALUES)
def test_check_offsets(values, pattern, device):
    with raises(pattern):
        pp.check_offsets(torch.tensor(values, device=device), 10)
    pp.check_offsets(torch.tensor([0, 0, 4, 4, 10], device=device), 10)  # valid: no error
    pp.check_offsets(torch.tensor([0], dtype=torch.int32, device=device), 0)
    with raises(r"^offsets: expected an int32 or int64 tensor"):
        pp.check_offsets(torch.tensor([0.0, 10.0], device=device), 10)


LENGTHS_HINT = (r"\. These look like sequence lengths: offsets are cumulative sequence boundaries \(cu_seqlens\), "
                r"starting at 0: use torch\.cat\(\[lengths\.new_zeros\(1\), lengths\.cumsum\(0\)\]\)$")


@pytest.mark.parametrize("call", list(OFFSETS_CALLS))
@pytest.mark.parametrize("values,pattern", [
    ([4, 6], r"^offsets: expected offsets\[0\] == 0, got 4" + LENGTHS_HINT),  # lengths, not boundaries
    ([2, 3, 5], r"^offsets: expected offsets\[0\] == 0, got 2" + LENGTHS_HINT),
    ([0, 6, 4], r"^offsets: expected non-decreasing values, got offsets\[1\] = 6 > offsets\[2\] = 4" + LENGTHS_HINT),
    ([1, 4, 10], r"^offsets: expected offsets\[0\] == 0, got 1$"),  # no hint: not lengths summing to 10
    ([0, 4, 11], r"^offsets: expected offsets\[-1\] == 10 \(the length of the scanned dimension\), "
                 r"got 11 \(offsets\[2\]\)$"),
], ids=["lengths", "lengths3", "lengths_decreasing", "no_hint", "last"])
def test_offsets_messages_say_where(call, values, pattern, device):
    if device.startswith("cuda"):
        pp.set_checks(True)
    with raises(pattern):
        OFFSETS_CALLS[call](torch.tensor(values, device=device), device)


@pytest.mark.parametrize("odtype", (torch.int32, torch.int64))
def test_offsets_non_contiguous_view(odtype, device):
    """Offsets may be a strided view: validation reads through the stride."""
    good = torch.tensor([0, 99, 4, -1, 10], dtype=odtype, device=device)[::2]
    x = torch.randn(10, 2, device=device)
    assert not good.is_contiguous()
    torch.testing.assert_close(pp.segmented_scan(x, good, 0), pp.segmented_scan(x, good.contiguous(), 0))
    pp.check_offsets(good, 10)
    bad = torch.tensor([0, 99, 6, -1, 4, 7, 10], dtype=odtype, device=device)[::2]
    with raises(r"^offsets: expected non-decreasing values, got offsets\[1\] = 6 > offsets\[2\] = 4$"):
        pp.check_offsets(bad, 10)
    if device.startswith("cuda"):
        pp.set_checks(True)
    with raises(r"^offsets: expected non-decreasing values, got offsets\[1\] = 6 > offsets\[2\] = 4$"):
        pp.segmented_scan(x, bad, 0)


def test_set_checks_round_trip():
    assert not _ops._checks_enabled()
    pp.set_checks(True)
    assert _ops._checks_enabled()
    pp.set_checks(False)
    assert not _ops._checks_enabled()


@pytest.mark.parametrize("call", list(OFFSETS_CALLS))
def test_offsets_on_another_device(call, device):
    other = other_device(device)
    with raises(r"^offsets: expected a tensor on " + device):
        OFFSETS_CALLS[call](torch.tensor([0, 4, 10], device=other), device)


@pytest.mark.parametrize("helper", ("flags_from_offsets", "segment_ids_from_offsets"))
@pytest.mark.parametrize("values,pattern", BAD_VALUES, ids=["first1", "first_neg", "decreasing", "last_big",
                                                            "last_small", "middle_oob", "no_sequences"])
def test_offsets_helpers_validate(helper, values, pattern, device):
    if device.startswith("cuda"):
        pp.set_checks(True)
    with raises(pattern):
        getattr(pp, helper)(torch.tensor(values, device=device), 10)


# ---- affine_scan and matrix_affine_scan ---------------------------------------------------------


def _ab(device, dtype=torch.float32):
    return torch.rand(2, 3, 10, dtype=dtype, device=device), torch.randn(2, 3, 10, dtype=dtype, device=device)


def _Ab(device, dtype=torch.float32):
    return torch.randn(2, 10, 3, 3, dtype=dtype, device=device), torch.randn(2, 10, 3, dtype=dtype, device=device)


def _zeros(*shape, device, **kw):
    return torch.zeros(*shape, device=device, **kw)


MATRIX_DIM = (r"^dim: expected a time dimension of b other than its last \(state\) dimension, in \[-3, 1\] "
              r"for b of shape \[2, 10, 3\]")

# (a call given the device, the expected message)
AFFINE_CASES = {
    "init_shape": (lambda dev: pp.affine_scan(*_ab(dev), -1, _zeros(2, 10, device=dev)),
                   r"^initial_state: expected shape \[2, 3\].*got \[2, 10\]"),
    "init_rank": (lambda dev: pp.affine_scan(*_ab(dev), -1, _zeros(3, device=dev)),
                  r"^initial_state: expected shape \[2, 3\]"),
    "init_packed": (lambda dev: pp.affine_scan(*_ab(dev), -1, _zeros(2, 3, device=dev),
                                               torch.tensor([0, 4, 10], device=dev)),
                    r"^initial_state: expected shape \[2, 2, 3\]"),  # one state per sequence
    "init_dim1": (lambda dev: pp.affine_scan(*_ab(dev), 1, _zeros(2, 3, device=dev)),
                  r"^initial_state: expected shape \[2, 10\]"),
    "init_dtype": (lambda dev: pp.affine_scan(*_ab(dev), -1, _zeros(2, 3, dtype=torch.float64, device=dev)),
                   r"^initial_state: expected dtype torch\.float32 \(b's\), got torch\.float64$"),
    "init_dtype_half": (lambda dev: pp.affine_scan(*_ab(dev, torch.half), -1, _zeros(2, 3, dtype=torch.bfloat16, device=dev)),
                        r"^initial_state: expected dtype torch\.float32 or torch\.float16 \(b's\), got torch\.bfloat16$"),
    "matrix_init_dtype": (lambda dev: pp.matrix_affine_scan(*_Ab(dev, torch.float64), -2, _zeros(2, 3, device=dev)),
                          r"^initial_state: expected dtype torch\.float64 \(b's\), got torch\.float32$"),
    "init_device": (lambda dev: pp.affine_scan(*_ab(dev), -1, _zeros(2, 3, device=other_device(dev))),
                    r"^initial_state: expected a tensor on"),
    "a_not_broadcastable": (lambda dev: pp.affine_scan(torch.rand(2, 4, 10, device=dev), _ab(dev)[1]),
                            r"^a: expected a shape broadcastable to b's \[2, 3, 10\], got \[2, 4, 10\]"),
    "a_not_broadcastable_last": (lambda dev: pp.affine_scan(torch.rand(10, 1, device=dev), _ab(dev)[1]),
                                 r"^a: expected a shape broadcastable"),
    "a_more_dims": (lambda dev: pp.affine_scan(torch.rand(1, 2, 3, 10, device=dev), _ab(dev)[1]),
                    r"^a: expected a shape broadcastable"),
    "a_dtype": (lambda dev: pp.affine_scan(_ab(dev, torch.float64)[0], _ab(dev)[1]),
                r"^a: expected the dtype of b \(torch\.float32\), got torch\.float64$"),
    "a_device": (lambda dev: pp.affine_scan(_ab(other_device(dev))[0], _ab(dev)[1]), r"^a: expected a tensor on"),
    "b_int": (lambda dev: pp.affine_scan(*(t.long() for t in _ab(dev))),
              r"^b: expected a floating or complex tensor, got torch\.int64$"),
    "b_0d": (lambda dev: pp.affine_scan(torch.rand((), device=dev), torch.randn((), device=dev), 0),
             r"^b: expected at least one dimension"),
    "dim": (lambda dev: pp.affine_scan(*_ab(dev), 3), r"^dim: expected a dimension in \[-3, 2\]"),
    "dim_exclusive": (lambda dev: _ops._affine_scan_exclusive(*_ab(dev), -4, None, None, False, False),
                      r"^dim: expected a dimension"),
    # matrix_affine_scan
    "matrix_d9": (lambda dev: pp.matrix_affine_scan(torch.randn(2, 10, 9, 9, device=dev), torch.randn(2, 10, 9, device=dev)),
                  r"^b: expected a state size d in \[1, 8\] \(the last dimension\), got 9"),
    "matrix_d0": (lambda dev: pp.matrix_affine_scan(torch.randn(2, 10, 0, 0, device=dev), torch.randn(2, 10, 0, device=dev)),
                  r"^b: expected a state size d in \[1, 8\]"),
    "matrix_A_not_square": (lambda dev: pp.matrix_affine_scan(torch.randn(2, 10, 3, 4, device=dev), _Ab(dev)[1]),
                            r"^A: expected shape \(\.\.\., L, d, d\) with d = 3, got \[2, 10, 3, 4\]"),
    "matrix_A_vector": (lambda dev: pp.matrix_affine_scan(torch.randn(2, 10, 3, device=dev), _Ab(dev)[1]),
                        r"^A: expected shape \(\.\.\., L, d, d\)"),
    "matrix_A_not_broadcastable": (lambda dev: pp.matrix_affine_scan(torch.randn(3, 10, 3, 3, device=dev), _Ab(dev)[1]),
                                   r"^A: expected leading dimensions broadcastable to b's \[2, 10\], got \[3, 10\]"),
    "matrix_A_more_dims": (lambda dev: pp.matrix_affine_scan(torch.randn(1, 2, 10, 3, 3, device=dev), _Ab(dev)[1]),
                           r"^A: expected leading dimensions broadcastable"),
    "matrix_A_dtype": (lambda dev: pp.matrix_affine_scan(_Ab(dev, torch.float64)[0], _Ab(dev)[1]),
                       r"^A: expected the dtype of b \(torch\.float32\), got torch\.float64$"),
    "matrix_half": (lambda dev: pp.matrix_affine_scan(*_Ab(dev, torch.half)),
                    r"^b: matrix_affine_scan expects torch\.float32 or torch\.float64, got torch\.float16$"),
    "matrix_complex": (lambda dev: pp.matrix_affine_scan(*_Ab(dev, torch.complex64)),
                       r"^b: matrix_affine_scan expects torch\.float32 or torch\.float64, got torch\.complex64$"),
    "matrix_b_1d": (lambda dev: pp.matrix_affine_scan(torch.randn(3, 3, device=dev), torch.randn(3, device=dev), 0),
                    r"^b: expected shape \(\.\.\., L, d\)"),
    "matrix_dim_state": (lambda dev: pp.matrix_affine_scan(*_Ab(dev), -1), MATRIX_DIM + r".*got -1$"),
    "matrix_dim_2": (lambda dev: pp.matrix_affine_scan(*_Ab(dev), 2), MATRIX_DIM + r".*got 2$"),
    "matrix_dim_3": (lambda dev: pp.matrix_affine_scan(*_Ab(dev), 3), MATRIX_DIM + r".*got 3$"),
    "matrix_dim_neg4": (lambda dev: pp.matrix_affine_scan(*_Ab(dev), -4), MATRIX_DIM + r".*got -4$"),
    "matrix_op_dim_state": (lambda dev: _ops.matrix_affine_scan(*_Ab(dev), -1), MATRIX_DIM),
    "matrix_op_exclusive_dim_state": (lambda dev: _ops._matrix_affine_scan_exclusive(*_Ab(dev), 2, None, None, False),
                                      MATRIX_DIM),
    "matrix_init_shape": (lambda dev: pp.matrix_affine_scan(*_Ab(dev), -2, _zeros(2, 2, device=dev)),
                          r"^initial_state: expected shape \[2, 3\]"),
    "matrix_init_packed": (lambda dev: pp.matrix_affine_scan(*_Ab(dev), -2, _zeros(2, 3, device=dev),
                                                             torch.tensor([0, 2, 2, 10], device=dev)),
                           r"^initial_state: expected shape \[3, 2, 3\]"),
    "matrix_A_device": (lambda dev: pp.matrix_affine_scan(_Ab(other_device(dev))[0], _Ab(dev)[1]),
                        r"^A: expected a tensor on"),
}


@pytest.mark.parametrize("case", list(AFFINE_CASES))
def test_affine_bad_arguments(case, device):
    check_bad_case(AFFINE_CASES, case, device)


# ---- the Python wrappers' checks ---------------------------------------------------------------


def test_set_checks_takes_only_a_bool():
    for bad in ("no", 0, 1, None, torch.tensor(True)):
        with pytest.raises(TypeError, match=r"^enabled: expected a bool, got "):
            pp.set_checks(bad)
    assert not _ops._checks_enabled()  # "no" did not switch the checks on


# (a call given offsets and the device, with the data's argument name in the hint)
TYPED_OFFSETS_CALLS = {
    "segmented_scan": (lambda o, dev, **kw: pp.segmented_scan(torch.randn(10, 2, device=dev), o, 0, **kw), "x"),
    "affine_scan": (lambda o, dev, **kw: pp.affine_scan(torch.rand(2, 10, device=dev), torch.randn(2, 10, device=dev),
                                                        1, offsets=o, **kw), "b"),
    "matrix_affine_scan": (lambda o, dev, **kw: pp.matrix_affine_scan(
        torch.randn(10, 2, 2, device=dev), torch.randn(10, 2, device=dev), 0, None, o, **kw), "b"),
    "check_offsets": (lambda o, dev, **kw: pp.check_offsets(o, 10, **kw), None),
    "segmented_compact": (lambda o, dev, **kw: pp.segmented_compact(
        torch.randn(10, 2, device=dev), torch.rand(10, device=dev) > 0.5, o, **kw), "x"),
    "segment_reduce": (lambda o, dev, **kw: pp.segment_reduce(torch.randn(10, 2, device=dev), o, "sum", **kw), "x"),
}


@pytest.mark.parametrize("call", list(TYPED_OFFSETS_CALLS))
@pytest.mark.parametrize("kind", ("list", "tuple", "numpy"))
def test_offsets_not_a_tensor(call, kind, device):
    fn, data = TYPED_OFFSETS_CALLS[call]
    values = {"list": [0, 4, 10], "tuple": (0, 4, 10), "numpy": np.array([0, 4, 10])}[kind]
    got = {"list": "list", "tuple": "tuple", "numpy": "numpy.ndarray"}[kind]
    hint = rf"use torch.tensor\(offsets, device={data}\.device\)$" if data else r"use torch.tensor\(offsets\)$"
    with pytest.raises(TypeError, match=r"^offsets: expected a torch.Tensor \(int32 or int64, on the data's device\), "
                                        rf"got {got}; " + hint):
        fn(values, device)
    # the same through the alias, named as given
    with pytest.raises(TypeError, match=r"^cu_seqlens: expected a torch.Tensor .*got " + got):
        fn(None, device, cu_seqlens=values)


def test_required_offsets_not_none(device):
    x = torch.randn(10, device=device)
    with pytest.raises(TypeError, match=r"^offsets: expected a torch.Tensor .*got NoneType"):
        pp.segmented_scan(x, None)
    with pytest.raises(TypeError, match=r"^offsets: expected a torch.Tensor .*got NoneType"):
        pp.check_offsets(None, 10)
    with pytest.raises(TypeError, match="offsets"):
        pp.segmented_scan(x)


@pytest.mark.parametrize("kind", ("list", "numpy"))
def test_data_not_a_tensor(kind, device):
    make = (lambda t: t.tolist()) if kind == "list" else (lambda t: t.numpy())
    got = "list" if kind == "list" else "numpy.ndarray"
    x = torch.randn(2, 10)
    offsets = torch.tensor([0, 4, 10], device=device)
    with pytest.raises(TypeError, match=rf"^x: expected a torch.Tensor, got {got}; use torch.as_tensor\(x\)$"):
        pp.scan(make(x), 1)
    with pytest.raises(TypeError, match=rf"^x: expected a torch.Tensor, got {got}"):
        pp.segmented_scan(make(x), offsets, 1)
    with pytest.raises(TypeError, match=rf"^b: expected a torch.Tensor, got {got}"):
        pp.affine_scan(x.to(device), make(x))
    with pytest.raises(TypeError, match=rf"^b: expected a torch.Tensor, got {got}"):
        pp.matrix_affine_scan(torch.randn(2, 10, 2, 2, device=device), make(torch.randn(2, 10, 2)))
    with pytest.raises(TypeError, match=rf"^a: expected a torch.Tensor broadcastable to b, or a Python number, got {got}"):
        pp.affine_scan(make(x), x.to(device))


@pytest.mark.parametrize("call", list(TYPED_OFFSETS_CALLS))
def test_offsets_and_cu_seqlens_together(call, device):
    fn, _ = TYPED_OFFSETS_CALLS[call]
    offsets = torch.tensor([0, 4, 10], device=device)
    with pytest.raises(TypeError, match=r"^offsets, cu_seqlens: pass one of them"):
        fn(offsets, device, cu_seqlens=offsets)


def test_cu_seqlens_gives_the_same_result(device):
    offsets = torch.tensor([0, 4, 4, 10], device=device)
    x = torch.randn(10, 3, device=device)
    assert torch.equal(pp.segmented_scan(x, cu_seqlens=offsets), pp.segmented_scan(x, offsets))
    assert torch.equal(pp.segmented_scan(x, None, 0, "max", cu_seqlens=offsets), pp.segmented_scan(x, offsets, 0, "max"))
    a, b, h0 = torch.rand(3, 10, device=device), torch.randn(3, 10, device=device), torch.randn(3, 3, device=device)
    for got, want in zip(pp.affine_scan(a, b, 1, h0, reverse=True, cu_seqlens=offsets),
                         pp.affine_scan(a, b, 1, h0, offsets, reverse=True)):
        assert torch.equal(got, want)
    A, bm = 0.5 * torch.randn(10, 2, 2, device=device), torch.randn(10, 2, device=device)
    for got, want in zip(pp.matrix_affine_scan(A, bm, 0, cu_seqlens=offsets),
                         pp.matrix_affine_scan(A, bm, 0, None, offsets)):
        assert torch.equal(got, want)
    pp.check_offsets(cu_seqlens=offsets, total=10)
    with raises(r"^offsets: expected offsets\[-1\] == 11"):
        pp.check_offsets(cu_seqlens=offsets, total=11)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float64, torch.bfloat16, torch.complex64))
@pytest.mark.parametrize("log_gates", (False, True))
def test_affine_scan_takes_a_scalar_gate(dtype, log_gates, device):
    b = torch.randn(2, 3, 20, device=device).to(dtype)
    value = 0.9 if not log_gates else -0.1
    for a in (value, torch.tensor(value), torch.tensor(value, dtype=torch.float64)):
        # the same gate given in full: the value in b's dtype everywhere
        want = pp.affine_scan(torch.as_tensor(a, dtype=dtype).to(device).expand(b.shape).contiguous(), b,
                              log_gates=log_gates)
        h, last = pp.affine_scan(a, b, log_gates=log_gates)
        assert h.dtype == b.dtype
        assert_close(h, want[0], scale=want[0].abs() + 1)
        assert_close(last, want[1], scale=want[1].abs() + 1)
    if dtype.is_complex:
        h, _ = pp.affine_scan(0.9j, b)
        assert_close(h, pp.affine_scan(torch.full_like(b, 0.9j), b)[0], scale=b.abs() * 10)
    else:
        with pytest.raises(TypeError, match=r"^a: a complex gate needs a complex b"):
            pp.affine_scan(0.9j, b)


def test_scalar_gate_gradient(device):
    a = torch.tensor(0.8, dtype=torch.float64, device=device, requires_grad=True)
    b = torch.randn(2, 15, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: pp.affine_scan(a, b), (a, b))
