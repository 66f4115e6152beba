"""Validation of packed-sequence offsets, and the switch for validating them on CUDA."""
from typing import Optional

import torch

from . import _args


@_args.takes_offsets(None)
def check_offsets(offsets: torch.Tensor, total: int, *, cu_seqlens: Optional[torch.Tensor] = None) -> None:
    """Validates packed-sequence ``offsets`` for data of length ``total``.

    ``offsets`` is a 1-D int32 or int64 tensor of length S+1 (flash-attn's ``cu_seqlens``, a
    keyword alias: ``check_offsets(cu_seqlens=o, total=n)``): ``offsets[0] == 0``,
    non-decreasing, ``offsets[-1] == total``. Raises ``RuntimeError`` naming what is wrong
    (``TypeError`` when ``offsets`` is not a tensor). Reads the tensor back to the host (a sync
    on CUDA).

    Example::

        >>> check_offsets(torch.tensor([0, 3, 3, 7]), 7)
    """
    # cu_seqlens arrives as offsets (see _args.takes_offsets).
    torch.ops.parprims.check_offsets(offsets, total)


def set_checks(enabled: bool) -> None:
    """Validates offsets on every CUDA call when ``enabled`` (a host sync per call).

    ``enabled`` must be a bool (a TypeError otherwise: ``set_checks("no")`` would switch the
    checks on). CPU ops always validate. The environment variable ``PARPRIMS_CHECKS=1`` sets
    this at import. Off by default, so that CUDA ops stay free of host synchronization.
    """
    torch.ops.parprims._set_checks(_args.expect_bool("enabled", enabled))
