"""The collectives that sequence parallelism (``torch_parprims.distributed``) is built on, and
the arithmetic of a rank's slice of packed offsets. ``torch.distributed`` is imported only when
a collective runs."""
import torch


def all_gather(summary: torch.Tensor, world: int, group) -> torch.Tensor:
    """``(world, *summary.shape)``: every rank's summary, in group-rank order (complex as real
    pairs, which every backend carries)."""
    import torch.distributed as dist

    complex_ = summary.is_complex()
    send = torch.view_as_real(summary) if complex_ else summary
    send = send.contiguous()
    # Concatenated along dim 0, the form every backend accepts (gloo refuses a stacked output).
    out = send.new_empty((world * send.shape[0],) + tuple(send.shape[1:]))
    dist.all_gather_into_tensor(out, send, group=group)
    out = out.view((world,) + tuple(send.shape))
    return torch.view_as_complex(out) if complex_ else out


def local_cu_seqlens(cu_seqlens: torch.Tensor, start, length: int) -> torch.Tensor:
    """The ``cu_seqlens`` argument of :func:`torch_parprims.distributed.affine_scan` for the slice ``[start, start +
    length)`` of a packed sequence whose offsets are ``cu_seqlens`` (S+1 global offsets): S+1
    offsets into the slice, the parts of sequences outside it empty. ``start`` may be a Python
    int or a tensor on the offsets' device (no host synchronization either way)."""
    return (cu_seqlens - start).clamp(0, length)
