"""Validation of packed-sequence offsets."""
import torch


def check_offsets(offsets: torch.Tensor, total: int) -> None:
    """Validates packed-sequence ``offsets`` for data of length ``total``.

    ``offsets`` is a 1-D int32 or int64 tensor of length S+1 (flash-attn's ``cu_seqlens``):
    ``offsets[0] == 0``, non-decreasing, ``offsets[-1] == total``. Raises ``RuntimeError``
    naming what is wrong. Reads the tensor back to the host (a sync on CUDA).

    Example::

        >>> check_offsets(torch.tensor([0, 3, 3, 7]), 7)
    """
    torch.ops.parprims.check_offsets(offsets, total)


def set_checks(enabled: bool) -> None:
    """Validates offsets on every CUDA call when ``enabled`` (a host sync per call).

    CPU ops always validate. The environment variable ``PARPRIMS_CHECKS=1`` sets this at
    import. Off by default, so that CUDA ops stay free of host synchronization.
    """
    torch.ops.parprims._set_checks(bool(enabled))
