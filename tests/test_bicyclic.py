"""Operand order through every engine path: the exact, non-commutative bicyclic monoid.

combine((p1, q1), (p2, q2)) = (p1 + p2 - m, q1 + q2 - m), m = min(q1, p2), combine(earlier,
later). Any path that combines out of order, drops a carry or restarts a segment in the wrong
place changes the integers, so every comparison here has zero tolerance.
"""
import itertools
from dataclasses import dataclass
from typing import Optional

import pytest
import torch

from torch_parprims import reference as ref

from helpers import CPU_CHUNK, GPU_MULTI_TILE, LENGTH_PATTERNS, OPCHECK_UTILS_NO_AUTOGRAD, make_offsets, sample_params, with_layout

_ops = torch.ops.parprims
DIRECTIONS = list(itertools.product((False, True), repeat=2))  # (exclusive, reverse)


@dataclass(frozen=True)
class BicyclicSample:
    shape: tuple
    dim: int = -1
    view: str = "contiguous"
    lengths: Optional[str] = None  # packed sequences along dim
    slow: bool = False

    def __str__(self):
        return f"{'x'.join(map(str, self.shape))}-d{self.dim}-{self.view}-{self.lengths or 'rows'}"

    def make(self, device):
        shape = list(self.shape)
        offsets = None
        if self.lengths:
            lengths = LENGTH_PATTERNS[self.lengths]()
            shape[self.dim] = sum(lengths)
            offsets = make_offsets(lengths, device=device)
        p = with_layout(torch.randint(0, 4, shape).to(device), self.view, self.dim)
        q = with_layout(torch.randint(0, 4, shape).to(device), self.view, self.dim)
        return p, q, offsets


n_chunked = 2 * CPU_CHUNK + 5
SAMPLES = [
    BicyclicSample((1, 1)),
    BicyclicSample((3, 33)),
    BicyclicSample((4096, 7)),  # many short rows
    BicyclicSample((1000, 2049), slow=True),
    BicyclicSample((1, n_chunked)),  # one row longer than two CPU chunks: the chunked path
    BicyclicSample((2, n_chunked)),  # few long rows
    BicyclicSample((n_chunked,), 0, "step"),
    BicyclicSample((n_chunked, 1), 0, "transpose"),  # chunked path with a strided row
    BicyclicSample((1, GPU_MULTI_TILE + 3)),  # several GPU tiles per row
    BicyclicSample((2, GPU_MULTI_TILE + 3), slow=True),
    BicyclicSample((1, 4 * GPU_MULTI_TILE + 7), slow=True),  # one huge row
    BicyclicSample((5, 40, 3), 1),  # dims other than the last
    BicyclicSample((70, 3, 5), 0, "transpose"),
    BicyclicSample((5, 3, 40), -1, "transpose"),  # transposed views
    BicyclicSample((33, 6), 0, "transpose"),
    BicyclicSample((6, 33), 1, "expand"),
    BicyclicSample((0,), 0),
    BicyclicSample((4, 0), 1),
    # Packed sequences with empty ones, some crossing the CPU chunk boundaries.
    BicyclicSample((1,), 0, lengths="random"),
    BicyclicSample((3, 1), 1, lengths="leading_trailing_empty"),
    BicyclicSample((1, 2), 0, "transpose", lengths="all_length_one"),
    BicyclicSample((1,), 0, lengths="huge_and_tiny"),
    BicyclicSample((1,), 0, lengths="chunk_crossing"),
    BicyclicSample((1,), 0, lengths="chunk_crossing_short"),
    BicyclicSample((2, 1), 1, lengths="chunk_crossing", slow=True),
    BicyclicSample((1,), 0, lengths="gpu_multi_tile", slow=True),
    BicyclicSample((1,), 0, lengths="all_empty"),
    BicyclicSample((1,), 0, lengths="no_sequences"),
]


@pytest.mark.parametrize("exclusive,reverse", DIRECTIONS, ids=["I", "R", "E", "ER"])
@pytest.mark.parametrize("s", sample_params(SAMPLES))
def test_bicyclic_scan_is_exact(s, exclusive, reverse, device):
    p, q, offsets = s.make(device)
    P, Q = _ops._scan_bicyclic(p, q, offsets, s.dim, exclusive, reverse)
    RP, RQ = ref.scan_bicyclic(p, q, offsets, s.dim, exclusive, reverse)
    assert P.dtype == Q.dtype == torch.int64 and P.shape == p.shape
    for got, want, name in ((P, RP, "p"), (Q, RQ, "q")):
        diff = (got.cpu() != want.cpu())
        assert not diff.any(), f"{name}: {int(diff.sum())} wrong, first at {tuple(diff.nonzero()[0].tolist())}"


def test_bicyclic_is_not_commutative(device):
    p = torch.tensor([0, 1], device=device)
    q = torch.tensor([1, 0], device=device)
    P, Q = _ops._scan_bicyclic(p, q, None, 0)
    assert (P.tolist(), Q.tolist()) == ([0, 0], [1, 0])  # "(" then ")" cancel
    P, Q = _ops._scan_bicyclic(p, q, None, 0, False, True)
    assert (P.tolist(), Q.tolist()) == ([1, 1], [1, 0])  # ")" then "(" do not
    assert ref.bicyclic_combine((0, 1), (1, 0)) != ref.bicyclic_combine((1, 0), (0, 1))


def test_bicyclic_opcheck(device):
    p, q, offsets = BicyclicSample((3, 1), 1, lengths="random").make(device)
    for args in ((p, q, offsets, 1, True, False), (p, q, None, 1, False, True)):
        torch.library.opcheck(_ops._scan_bicyclic.default, args, test_utils=OPCHECK_UTILS_NO_AUTOGRAD)
