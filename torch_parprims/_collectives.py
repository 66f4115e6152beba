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


def global_rank(group, rank: int) -> int:
    """The global rank of ``group``'s rank ``rank`` (point-to-point messages name global ranks)."""
    import torch.distributed as dist

    return rank if group is None else dist.get_global_rank(group, rank)


def chain_neighbours(group, rank: int, world: int, reverse: bool = False):
    """The global ranks that the state of a scan split across ``group`` comes from and goes to
    from ``rank``: ``(before, after)`` in the scan's order (rank order, or its reverse), None at
    the chain's ends."""
    step = -1 if reverse else 1
    before, after = rank - step, rank + step
    return (global_rank(group, before) if 0 <= before < world else None,
            global_rank(group, after) if 0 <= after < world else None)


def send(message: torch.Tensor, dst: int, group):
    """Starts sending ``message`` to global rank ``dst``; returns what :func:`wait_all` takes
    (the request and the buffer, which must live until the send completes)."""
    import torch.distributed as dist

    buffer = _wire(message).contiguous()
    return dist.isend(buffer, dst=dst, group=group), buffer


def recv(shape, dtype, device, src: int, group) -> torch.Tensor:
    """A tensor of ``shape`` and ``dtype`` received from global rank ``src``: on a GPU, the
    current stream's later work waits for it (the host does not); on the CPU, the call waits."""
    import torch.distributed as dist

    out = torch.empty(shape, dtype=dtype, device=device)
    dist.irecv(_wire(out), src=src, group=group).wait()
    return out


def wait_all(sends) -> None:
    for request, _ in sends:
        request.wait()


def _wire(x: torch.Tensor) -> torch.Tensor:
    """``x`` as the backends carry it: complex as real pairs (a view)."""
    return torch.view_as_real(x) if x.is_complex() else x


def local_cu_seqlens(cu_seqlens: torch.Tensor, start, length: int) -> torch.Tensor:
    """The ``cu_seqlens`` argument of :func:`torch_parprims.distributed.affine_scan` for the slice ``[start, start +
    length)`` of a packed sequence whose offsets are ``cu_seqlens`` (S+1 global offsets): S+1
    offsets into the slice, the parts of sequences outside it empty. ``start`` may be a Python
    int or a tensor on the offsets' device (no host synchronization either way)."""
    return (cu_seqlens - start).clamp(0, length)
