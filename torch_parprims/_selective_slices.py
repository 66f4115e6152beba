"""What the two schedules of :func:`torch_parprims.distributed.selective_scan` share: the
call's fixed arguments, the inputs by name, and the local op on a rank's slice."""
from dataclasses import dataclass
from typing import Any, Optional

import torch

from .ops.selective_scan import selective_scan as _local_selective_scan


@dataclass(frozen=True)
class ScanSpec:
    """What a call of the distributed selective scan fixes for every pass: the group, this
    rank's place in it, and the op's non-tensor arguments."""

    group: Any
    rank: int
    world: int
    delta_softplus: bool
    cu_seqlens: Optional[torch.Tensor]


SELECTIVE_INPUTS = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias", "initial_state")


def run_selective(args: dict, spec: ScanSpec, initial_state):
    """The library's selective scan of this rank's slice (``args``: the inputs by name) from
    ``initial_state``."""
    return _local_selective_scan(args["u"], args["delta"], args["A"], args["B"], args["C"], args["D"], args["z"],
                                 args["delta_bias"], spec.delta_softplus, initial_state, spec.cu_seqlens)


def grad_leaf(x, needed: bool):
    """``x`` detached, as a leaf that requires grad when ``needed`` (and ``x`` can have one)."""
    if not isinstance(x, torch.Tensor):
        return x
    return x.detach().requires_grad_(needed and (x.is_floating_point() or x.is_complex()))
