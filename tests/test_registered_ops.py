"""One convention per fact: every public function and the op it wraps take the same arguments.

A user (or a traced graph) may call ``torch.ops.parprims.<op>`` directly; given the same
positional and keyword arguments as the Python wrapper (``dim`` included, negative values and
defaults too), it must compute the same thing, and its schema must carry the wrapper's names and
defaults.
"""
import inspect

import pytest
import torch

import torch_parprims as pp

_ops = torch.ops.parprims

WRAPPERS = {
    "scan": pp.scan,
    "segmented_scan": pp.segmented_scan,
    "affine_scan": pp.affine_scan,
    "matrix_affine_scan": pp.matrix_affine_scan,
    "check_offsets": pp.check_offsets,
    "segmented_compact": pp.segmented_compact,
    "pad": pp.pad,
    "offsets_from_lengths": pp.offsets_from_lengths,
    "lengths_from_offsets": pp.lengths_from_offsets,
    "offsets_from_flags": pp.offsets_from_flags,
    "flags_from_offsets": pp.flags_from_offsets,
    "segment_ids_from_offsets": pp.segment_ids_from_offsets,
    "segment_reduce": pp.segment_reduce,
    "reduce": pp.reduce,
}


def _same(got, want):
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert torch.equal(g, w)


def _inputs(device):
    offsets = torch.tensor([0, 2, 2, 5], device=device)
    x = torch.randn(4, 5, 3, device=device)
    a, b = torch.rand(4, 5, 3, device=device), torch.randn(4, 5, 3, device=device)
    A, bm = 0.5 * torch.randn(4, 5, 3, 2, 2, device=device), torch.randn(4, 5, 3, 2, device=device)
    return x, offsets, a, b, A, bm


# (op, id, a function of the inputs (x, offsets, a, b, A, bm) giving (args, kwargs))
CALLS = [
    ("scan", "dim1", lambda x, o, a, b, A, bm: ((x, 1), {})),
    ("scan", "dim-1-max-exclusive", lambda x, o, a, b, A, bm: ((x, -1, "max"), {"exclusive": True})),
    ("scan", "kw-dim-3", lambda x, o, a, b, A, bm: ((x,), {"dim": -3, "op": "logaddexp", "reverse": True})),
    ("scan", "dim-2-all-positional", lambda x, o, a, b, A, bm: ((x, -2, "mul", True, True), {})),
    ("segmented_scan", "default-dim", lambda x, o, a, b, A, bm: ((x.transpose(0, 1), o), {})),
    ("segmented_scan", "dim1", lambda x, o, a, b, A, bm: ((x, o, 1), {})),
    ("segmented_scan", "dim-2-min-reverse", lambda x, o, a, b, A, bm: ((x, o, -2, "min"), {"reverse": True})),
    ("segmented_scan", "kw-dim-2", lambda x, o, a, b, A, bm: ((x, o), {"dim": -2, "op": "add", "exclusive": True})),
    ("affine_scan", "default-dim", lambda x, o, a, b, A, bm: ((a, b), {})),
    ("affine_scan", "dim1", lambda x, o, a, b, A, bm: ((a, b, 1), {})),
    ("affine_scan", "dim-2-offsets", lambda x, o, a, b, A, bm: ((a, b, -2), {"offsets": o, "reverse": True})),
    ("affine_scan", "kw-dim-3-log-gates", lambda x, o, a, b, A, bm: ((a[:1], b), {"dim": -3, "log_gates": True})),
    ("affine_scan", "dim0-initial-state", lambda x, o, a, b, A, bm: ((a, b, 0, torch.randn(5, 3, device=b.device)), {})),
    # matrix_affine_scan: dim counts b's dimensions (its last is the state); default -2, the time
    ("matrix_affine_scan", "default-dim", lambda x, o, a, b, A, bm: ((A, bm), {})),
    ("matrix_affine_scan", "dim1", lambda x, o, a, b, A, bm: ((A, bm, 1), {})),
    ("matrix_affine_scan", "dim-2-offsets", lambda x, o, a, b, A, bm: (
        (A, bm, -2), {"offsets": torch.tensor([0, 1, 3], device=bm.device)})),
    ("matrix_affine_scan", "dim-3-offsets-reverse", lambda x, o, a, b, A, bm: (
        (A[:1], bm, -3), {"offsets": o, "reverse": True})),
    ("matrix_affine_scan", "kw-dim-4", lambda x, o, a, b, A, bm: ((A, bm), {"dim": -4})),
    ("matrix_affine_scan", "dim0-initial-state", lambda x, o, a, b, A, bm: (
        (A, bm, 0, torch.randn(5, 3, 2, device=bm.device)), {})),
    ("segment_reduce", "default-dim", lambda x, o, a, b, A, bm: ((x.transpose(0, 1), o, "max"), {})),
    ("segment_reduce", "dim-2-kw", lambda x, o, a, b, A, bm: ((x, o), {"op": "logsumexp", "dim": -2})),
    ("reduce", "dim1-mean", lambda x, o, a, b, A, bm: ((x, 1, "mean"), {})),
    ("reduce", "dim-1-mask-keepdim", lambda x, o, a, b, A, bm: (
        (x, -1, "prod", x > 0), {"keepdim": True})),
]


@pytest.mark.parametrize("name,make", [pytest.param(n, m, id=f"{n}-{i}") for n, i, m in CALLS])
def test_registered_op_equals_wrapper(name, make, device):
    args, kwargs = make(*_inputs(device))
    _same(getattr(_ops, name)(*args, **kwargs), WRAPPERS[name](*args, **kwargs))


def test_registered_check_offsets_equals_wrapper(device):
    offsets = torch.tensor([0, 2, 5], device=device)
    _ops.check_offsets(offsets, 5)
    pp.check_offsets(offsets, total=5)
    for fn in (_ops.check_offsets, pp.check_offsets):
        with pytest.raises(RuntimeError, match=r"^offsets: expected offsets\[-1\] == 6"):
            fn(offsets, total=6)


def _schema_args(name):
    return getattr(_ops, name).default._schema.arguments


@pytest.mark.parametrize("name", list(WRAPPERS))
def test_schema_matches_wrapper_signature(name):
    """The wrapper's parameters are the schema's arguments, in order, with the same defaults;
    its only extra is the keyword-only ``cu_seqlens`` alias of ``offsets``."""
    params = inspect.signature(WRAPPERS[name]).parameters
    schema = _schema_args(name)
    positional = [p for p in params.values() if p.kind is not inspect.Parameter.KEYWORD_ONLY]
    extras = [p.name for p in params.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert [p.name for p in positional] == [a.name for a in schema]
    assert extras == (["cu_seqlens"] if "offsets" in params else [])
    for p, arg in zip(positional, schema):
        if arg.has_default_value():
            assert p.default is not inspect.Parameter.empty, f"{name}({p.name}): the schema has a default"
            assert p.default == arg.default_value, (
                f"{name}({p.name}): the wrapper's default {p.default!r} != the schema's {arg.default_value!r}")
        else:
            assert p.default is inspect.Parameter.empty, f"{name}({p.name}): the schema has no default"
