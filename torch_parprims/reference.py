"""Pure-PyTorch reference of every torch_parprims op: the test oracle and a readable spec.

Everything here is a plain loop over sequences (and, for the recurrences, over time) built
from ``torch.cumsum``-style primitives, written for clarity, not speed. Floating and complex
inputs are computed and returned in float64 / complex128 (the tests compare the library's
output against these wide results); integer and bool inputs are computed exactly and returned
in the dtype the op returns. The functions are differentiable through ordinary autograd.

This file imports nothing but torch: it loads without the compiled extension, even as a file
by its path (``importlib.util.spec_from_file_location``), so it can check any build, or none.

Conventions shared by every op:

* ``offsets`` (``cu_seqlens``) cut the scanned dimension into sequences
  ``[offsets[k], offsets[k+1])``; every sequence is processed alone.
* ``exclusive`` puts the operator's identity first; ``reverse`` means flip, scan, flip.
* ``dim`` is any dimension of the data, a negative one counting from the end as in torch
  (for ``matrix_affine_scan``, any dimension of ``b`` but its last, the state).
"""
from typing import List, Optional, Tuple

import torch

Tensor = torch.Tensor


# ---- helpers -----------------------------------------------------------------------------


def wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the reference computes in: float64 / complex128 for floating types."""
    if dtype.is_complex:
        return torch.complex128
    if dtype.is_floating_point:
        return torch.float64
    return dtype


def segments(length: int, offsets: Optional[Tensor]) -> List[Tuple[int, int]]:
    """``[(start, end), ...]`` of the sequences along a dimension of size ``length``."""
    if offsets is None:
        return [(0, length)]
    o = offsets.tolist()
    return list(zip(o[:-1], o[1:]))


def identity(op: str, dtype: torch.dtype):
    """The identity element of ``op`` for values of ``dtype``."""
    if op == "add":
        return 0
    if op == "mul":
        return 1
    if op == "logaddexp":
        return float("-inf")
    if dtype == torch.bool:
        return op == "min"  # max: False, min: True
    if dtype.is_floating_point:
        return float("-inf") if op == "max" else float("inf")
    info = torch.iinfo(dtype)
    return info.min if op == "max" else info.max


# ---- scans -------------------------------------------------------------------------------


def _inclusive(x: Tensor, dim: int, op: str) -> Tensor:
    if op == "add":
        return torch.cumsum(x, dim)  # int and bool give int64, as the op does
    if op == "mul":
        return torch.cumprod(x, dim)
    if op == "max":
        return torch.cummax(x, dim).values  # NaN propagates
    if op == "min":
        return torch.cummin(x, dim).values
    if op == "logaddexp":
        return torch.logcumsumexp(x, dim)
    raise ValueError(f"op: unknown scan op {op!r}")


def _shift(y: Tensor, dim: int, fill) -> Tensor:
    """``[fill, y_0, ..., y_{n-2}]`` along ``dim``: inclusive -> exclusive."""
    head = torch.full_like(y.narrow(dim, 0, min(1, y.size(dim))), fill)
    return torch.cat([head, y.narrow(dim, 0, max(0, y.size(dim) - 1))], dim)


def _shift_segments(y: Tensor, dim: int, offsets: Optional[Tensor], reverse: bool, fill) -> Tensor:
    """Inclusive -> exclusive for every sequence, in scan order."""
    parts = []
    for s, e in segments(y.size(dim), offsets):
        seg = y.narrow(dim, s, e - s)
        parts.append(_shift(seg.flip(dim), dim, fill).flip(dim) if reverse else _shift(seg, dim, fill))
    return torch.cat(parts, dim) if parts else y


def _scan_one(x: Tensor, dim: int, op: str, exclusive: bool, reverse: bool) -> Tensor:
    """The scan of one sequence (``x`` already in the compute dtype)."""
    if reverse:
        return _scan_one(x.flip(dim), dim, op, exclusive, False).flip(dim)
    y = _inclusive(x, dim, op)
    return _shift(y, dim, identity(op, x.dtype)) if exclusive else y


def _scan_values(xw: Tensor, offsets: Optional[Tensor], dim: int, op: str, exclusive: bool, reverse: bool) -> Tensor:
    """Each sequence scanned alone, concatenated back."""
    parts = [_scan_one(xw.narrow(dim, s, e - s), dim, op, exclusive, reverse)
             for s, e in segments(xw.size(dim), offsets)]
    return torch.cat(parts, dim) if parts else _inclusive(xw, dim, op)  # parts: [] if offsets == [0]


def segmented_scan(
    x: Tensor,
    offsets: Optional[Tensor],
    dim: int = 0,
    op: str = "add",
    exclusive: bool = False,
    reverse: bool = False,
) -> Tensor:
    """Reference of ``parprims.segmented_scan`` (``offsets=None``: one sequence per row)."""
    if x.dim() == 0:
        return segmented_scan(x.reshape(1), offsets, dim, op, exclusive, reverse).reshape(())
    dim = dim % x.dim()
    xw = x.to(wide_dtype(x.dtype))
    out = _scan_values(xw, offsets, dim, op, exclusive, reverse)
    if op in ("max", "min") and xw.is_floating_point():
        # The same values gathered from x at the selected positions, so that autograd sends the
        # gradient to the first of tied elements, as the op does (torch.cummax picks the last).
        _, index = scan_with_indices(x.detach(), offsets, dim, op, exclusive, reverse)
        out = torch.where(index >= 0, xw.gather(dim, index.clamp(min=0)), out)
    return out


def scan(x: Tensor, dim: int, op: str = "add", exclusive: bool = False, reverse: bool = False) -> Tensor:
    """Reference of ``parprims.scan``: ``cumsum`` / ``cumprod`` / ``cummax`` / ``cummin`` /
    ``logcumsumexp`` along ``dim``, with a shift for ``exclusive`` and flips for ``reverse``."""
    return segmented_scan(x, None, dim, op, exclusive, reverse)


def scan_with_indices(
    x: Tensor,
    offsets: Optional[Tensor],
    dim: int,
    op: str,
    exclusive: bool = False,
    reverse: bool = False,
) -> Tuple[Tensor, Tensor]:
    """Reference of ``parprims._scan_with_indices``: the max/min scan and, for every output,
    the position along ``dim`` (in the whole tensor, not the sequence) of the element it came
    from. Ties go to the first occurrence in scan order (the later position when ``reverse``);
    the first NaN wins; the identity of an exclusive scan has position -1."""
    assert op in ("max", "min")
    if x.dim() == 0:
        v, i = scan_with_indices(x.reshape(1), offsets, 0, op, exclusive, reverse)
        return v.reshape(()), i.reshape(())
    dim = dim % x.dim()
    values = _scan_values(x.to(wide_dtype(x.dtype)), offsets, dim, op, False, reverse)
    v = values.movedim(dim, -1)
    n = v.size(-1)
    pos = torch.arange(n, device=x.device).expand_as(v)
    if reverse:  # walk in scan order: physical position n-1-t at step t
        v, pos = v.flip(-1), pos.flip(-1)
    # The running extreme changes value exactly where a new element takes over; that element's
    # position is the index until the next change. NaN equals NaN here (the first NaN stays).
    same = (v[..., 1:] == v[..., :-1]) | (v[..., 1:].isnan() & v[..., :-1].isnan())
    starts = torch.ones_like(v, dtype=torch.bool)
    starts[..., 1:] = ~same
    for s, e in segments(n, offsets):  # every sequence start is a change
        if e > s:
            starts[..., (n - e) if reverse else s] = True
    step = torch.arange(n, device=x.device).expand_as(v)
    last_start = torch.cummax(torch.where(starts, step, 0), -1).values
    index = pos.gather(-1, last_start)
    if reverse:
        index = index.flip(-1)
    index = index.movedim(-1, dim)
    if exclusive:
        values = _shift_segments(values, dim, offsets, reverse, identity(op, values.dtype))
        index = _shift_segments(index, dim, offsets, reverse, -1)
    return values, index


# ---- the bicyclic monoid -----------------------------------------------------------------


def bicyclic_combine(earlier: Tuple[int, int], later: Tuple[int, int]) -> Tuple[int, int]:
    """``(p1, q1) * (p2, q2) = (p1 + p2 - m, q1 + q2 - m)`` with ``m = min(q1, p2)``: the word
    ``)^p (^q`` with matched brackets cancelled. Exact and not commutative."""
    (p1, q1), (p2, q2) = earlier, later
    m = min(q1, p2)
    return p1 + p2 - m, q1 + q2 - m


def scan_bicyclic(
    p: Tensor,
    q: Tensor,
    offsets: Optional[Tensor],
    dim: int,
    exclusive: bool = False,
    reverse: bool = False,
) -> Tuple[Tensor, Tensor]:
    """Reference of ``parprims._scan_bicyclic``: a Python loop, ``combine(earlier, later)``
    in scan order (from the end when ``reverse``), identity ``(0, 0)``."""
    dim = dim % p.dim()
    pr, qr = p.movedim(dim, -1), q.movedim(dim, -1)
    shape = pr.shape
    n = shape[-1]
    if n == 0 or p.numel() == 0:
        return p.clone(), q.clone()
    P, Q = pr.reshape(-1, n).tolist(), qr.reshape(-1, n).tolist()
    outP = [[0] * n for _ in P]
    outQ = [[0] * n for _ in Q]
    for r in range(len(P)):
        for s, e in segments(n, offsets):
            acc = (0, 0)
            for t in (range(e - 1, s - 1, -1) if reverse else range(s, e)):
                new = bicyclic_combine(acc, (P[r][t], Q[r][t]))
                outP[r][t], outQ[r][t] = acc if exclusive else new
                acc = new
    as_tensor = lambda v: torch.tensor(v, dtype=torch.int64).reshape(shape).movedim(-1, dim)
    return as_tensor(outP).to(p.device), as_tensor(outQ).to(p.device)


# ---- affine recurrences ------------------------------------------------------------------


def _initial_states(init: Optional[Tensor], time_first: Tensor, offsets: Optional[Tensor]) -> Tensor:
    """Initial states as ``(S, *state_shape)`` in the compute dtype (zeros when missing)."""
    num = len(segments(time_first.size(0), offsets))
    if init is None:
        return time_first.new_zeros((num,) + tuple(time_first.shape[1:]))
    init = init.to(time_first.dtype)
    return init if offsets is not None else init.unsqueeze(0)


def _recurrence(step, x_first: Tensor, h0: Tensor, offsets, reverse: bool, exclusive: bool):
    """Runs ``h = step(t, h)`` over time (dim 0 of ``x_first``) per sequence.

    Returns the outputs stacked along dim 0 (``h_t``, or ``h_{t-1}`` when ``exclusive``) and
    the final states ``(S, ...)`` (the initial state for an empty sequence)."""
    n = x_first.size(0)
    outs: List[Optional[Tensor]] = [None] * n
    finals = []
    for k, (s, e) in enumerate(segments(n, offsets)):
        h = h0[k]
        for t in (range(e - 1, s - 1, -1) if reverse else range(s, e)):
            new = step(t, h)
            outs[t] = h if exclusive else new
            h = new
        finals.append(h)
    out = torch.stack(outs) if n else torch.empty_like(x_first)
    final = torch.stack(finals) if finals else h0[:0]
    return out, final


def affine_scan(
    a: Tensor,
    b: Tensor,
    dim: int = -1,
    initial_state: Optional[Tensor] = None,
    offsets: Optional[Tensor] = None,
    reverse: bool = False,
    log_gates: bool = False,
    exclusive: bool = False,
) -> Tuple[Tensor, Tensor]:
    """Reference of ``parprims.affine_scan``: ``h_t = a_t * h_{t-1} + b_t`` along ``dim``.

    ``a`` broadcasts to ``b`` (``log_gates``: ``a`` holds ``log a``). ``h_{-1}`` is
    ``initial_state`` (``b.shape`` without ``dim``, or ``(S, ...)`` with ``offsets``; zeros when
    ``None``). ``reverse``: ``h_t = a_t * h_{t+1} + b_t``, the initial state enters at each
    sequence's end and the final state is the one at its start. Returns ``(h, final_state)``,
    ``final_state`` being the last ``h`` of each sequence. ``exclusive=True`` is
    ``parprims._affine_scan_exclusive``: outputs the state before each step (``h_{t-1}``)."""
    ct = wide_dtype(b.dtype)
    dim = dim % b.dim()
    gates = a.to(ct).exp() if log_gates else a.to(ct)
    A = gates.expand(b.shape).movedim(dim, 0)
    B = b.to(ct).movedim(dim, 0)
    h0 = _initial_states(initial_state, B, offsets)
    h, final = _recurrence(lambda t, h: A[t] * h + B[t], B, h0, offsets, reverse, exclusive)
    return h.movedim(0, dim), (final if offsets is not None else final[0])


def matrix_affine_scan(
    A: Tensor,
    b: Tensor,
    dim: int = -2,
    initial_state: Optional[Tensor] = None,
    offsets: Optional[Tensor] = None,
    reverse: bool = False,
    exclusive: bool = False,
) -> Tuple[Tensor, Tensor]:
    """Reference of ``torch_parprims.matrix_affine_scan``: ``h_t = A_t @ h_{t-1} + b_t``.

    ``A``: ``(..., L, d, d)`` with leading dims broadcastable to ``b``'s; ``b``: ``(..., L, d)``;
    ``dim`` indexes ``b`` (any but its last). States are ``(..., d)`` = ``b`` without ``dim``,
    ``(S, ..., d)`` with ``offsets``. Same conventions as :func:`affine_scan`; ``exclusive=True``
    is ``parprims._matrix_affine_scan_exclusive`` (the same ``dim`` convention)."""
    ct = wide_dtype(b.dtype)
    dim = dim % b.dim()
    assert dim != b.dim() - 1, "dim: the last dimension of b is the state"
    d = b.size(-1)
    Aw = A.to(ct).expand(tuple(b.shape) + (d,)).movedim(dim, 0)
    B = b.to(ct).movedim(dim, 0)
    h0 = _initial_states(initial_state, B, offsets)
    step = lambda t, h: (Aw[t] @ h.unsqueeze(-1)).squeeze(-1) + B[t]
    h, final = _recurrence(step, B, h0, offsets, reverse, exclusive)
    return h.movedim(0, dim), (final if offsets is not None else final[0])


# ---- selective scan (Mamba-1) ---------------------------------------------------------------


def _per_channel(P: Tensor, dim: int) -> Tensor:
    """B or C as ``(batch, dim, N, L)`` (variable, grouped) or ``(dim, N)`` (constant), float64."""
    P = P.to(torch.float64)
    if P.dim() == 3:  # (batch, N, L): shared by every channel
        return P.unsqueeze(1).expand(P.shape[0], dim, P.shape[1], P.shape[2])
    if P.dim() == 4:  # (batch, G, N, L): channel d reads group d // (dim // G)
        return P.repeat_interleave(dim // P.shape[1], dim=1)
    return P


def selective_scan(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    delta_bias: Optional[Tensor] = None,
    delta_softplus: bool = False,
    initial_state: Optional[Tensor] = None,
    cu_seqlens: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Mamba-1's selective scan, one time step after another, in float64.

    Shapes: u, delta, z ``(batch, dim, L)``; A ``(dim, N)``; B and C ``(dim, N)`` (constant),
    ``(batch, N, L)`` (variable) or ``(batch, G, N, L)`` (grouped: channel d reads group
    d // (dim // G)); D, delta_bias ``(dim,)``. For every (batch, d, n)::

        delta_t = softplus(delta_t + delta_bias)          (softplus only if delta_softplus)
        h_t     = exp(delta_t * A) * h_{t-1} + delta_t * B_t * u_t
        y_t     = sum_n C_t * h_t + D * u_t
        out_t   = y_t * silu(z_t)                        (when z is given)

    ``h_{-1}`` is ``initial_state`` ``(batch, dim, N)`` or zeros. With ``cu_seqlens`` (batch 1,
    sequences packed along L), the state restarts at every sequence from its own initial state
    (``(S, dim, N)``). Returns ``(out, last_state)`` in float64: ``last_state`` is the state after
    the last step of each row (or sequence; an empty sequence keeps its initial state).
    """
    f64 = torch.float64
    u, delta, A = u.to(f64), delta.to(f64), A.to(f64)
    batch, dim, length = u.shape
    if delta_bias is not None:
        delta = delta + delta_bias.to(f64)[:, None]
    if delta_softplus:
        delta = torch.nn.functional.softplus(delta)
    Bc, Cc = _per_channel(B, dim), _per_channel(C, dim)

    def step_terms(t):
        Bt = Bc[..., t] if Bc.dim() == 4 else Bc
        Ct = Cc[..., t] if Cc.dim() == 4 else Cc
        dA = torch.exp(delta[:, :, t, None] * A)  # (batch, dim, N)
        dBu = (delta[:, :, t] * u[:, :, t])[..., None] * Bt
        return dA, dBu, Ct

    ys = []
    if cu_seqlens is None:
        h = torch.zeros(batch, dim, A.shape[1], dtype=f64, device=u.device)
        if initial_state is not None:
            h = initial_state.to(f64).expand_as(h)
        for t in range(length):
            dA, dBu, Ct = step_terms(t)
            h = dA * h + dBu
            ys.append((h * Ct).sum(-1))
        last = h
    else:
        lasts = []
        for k, (s, e) in enumerate(segments(length, cu_seqlens)):
            h = torch.zeros(batch, dim, A.shape[1], dtype=f64, device=u.device)
            if initial_state is not None:
                h = initial_state[k : k + 1].to(f64)
            for t in range(s, e):
                dA, dBu, Ct = step_terms(t)
                h = dA * h + dBu
                ys.append((h * Ct).sum(-1))
            lasts.append(h[0])
        last = torch.stack(lasts) if lasts else u.new_zeros(0, dim, A.shape[1], dtype=f64)
    y = torch.stack(ys, dim=-1) if ys else u.new_zeros(batch, dim, 0, dtype=f64)
    if D is not None:
        y = y + D.to(f64)[:, None] * u
    if z is not None:
        y = y * torch.nn.functional.silu(z.to(f64))
    return y, last


def selective_state_update(
    state: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = False,
) -> Tuple[Tensor, Tensor]:
    """One decode step of the selective scan, in float64; returns ``(out, new_state)``.

    Without heads: state ``(batch, dim, N)``, x/dt/z ``(batch, dim)``, A ``(dim, N)``, B/C
    ``(batch, N)`` or ``(batch, G, N)``, D/dt_bias ``(dim,)``. With heads: state
    ``(batch, H, P, N)``, x/dt/z ``(batch, H, P)``, A ``(H, P, N)``, B/C ``(batch, G, N)``,
    D/dt_bias ``(H, P)``. The state is not modified here.
    """
    f64 = torch.float64
    heads = state.dim() == 4
    s = state.to(f64)
    if not heads:  # `dim` heads of one channel: channel d reads group d // (dim // G)
        s, x, dt, A = s[:, :, None], x[:, :, None], dt[:, :, None], A[:, None]
        z = None if z is None else z[:, :, None]
        D = None if D is None else D[:, None]
        dt_bias = None if dt_bias is None else dt_bias[:, None]
    nheads = s.shape[1]
    B, C = B.to(f64), C.to(f64)
    if B.dim() == 2:
        B, C = B[:, None], C[:, None]
    B = B.repeat_interleave(nheads // B.shape[1], dim=1)[:, :, None]  # (batch, H, 1, N)
    C = C.repeat_interleave(nheads // C.shape[1], dim=1)[:, :, None]
    dt = dt.to(f64)
    if dt_bias is not None:
        dt = dt + dt_bias.to(f64)
    if dt_softplus:
        dt = torch.nn.functional.softplus(dt)
    x = x.to(f64)
    new = torch.exp(dt[..., None] * A.to(f64)) * s + (dt * x)[..., None] * B
    out = (new * C).sum(-1)
    if D is not None:
        out = out + D.to(f64) * x
    if z is not None:
        out = out * torch.nn.functional.silu(z.to(f64))
    if not heads:
        out, new = out[:, :, 0], new[:, :, 0]
    return out, new


# ---- compaction and packed-sequence utilities ----------------------------------------------
# Compaction copies values: every dtype is kept as it is (no widening).


def compact(
    x: Tensor, mask: Tensor, dim: int = 0, capacity: Optional[int] = None, fill_value=0
) -> Tuple[Tensor, int, Tensor]:
    """``(values, count, indices)``: ``x[mask]`` (elementwise mask) or the slices along ``dim``
    where a 1-D mask is true, with the source positions; with ``capacity``, the first
    ``capacity`` of them, padded with ``fill_value`` (indices with -1). ``count`` is the number of
    true entries of the mask."""
    elementwise = tuple(mask.shape) == tuple(x.shape)
    flat = x.reshape(-1) if elementwise else x.movedim(dim, 0)
    kept = [p for p, keep in enumerate(mask.reshape(-1).tolist()) if keep]
    count = len(kept)
    slots = count if capacity is None else capacity
    values = flat.new_full((slots, *flat.shape[1:]), fill_value)
    indices = torch.full((slots,), -1, dtype=torch.int64)
    for slot, p in enumerate(kept[:slots]):
        values[slot] = flat[p]
        indices[slot] = p
    return (values if elementwise else values.movedim(0, dim)), count, indices


def segmented_compact(
    x: Tensor, mask: Tensor, offsets: Tensor, capacity: Optional[int] = None, fill_value=0
) -> Tuple[Tensor, Tensor]:
    """Each sequence's kept rows, concatenated, with the new boundaries (clamped to
    ``capacity`` in the capacity form, whose rows past the count hold ``fill_value``)."""
    pieces, bounds = [], [0]
    for start, end in segments(x.shape[0], offsets):
        piece = x[start:end][mask[start:end]]
        pieces.append(piece)
        bounds.append(bounds[-1] + piece.shape[0])
    values = torch.cat(pieces) if pieces else x[:0]
    new_offsets = torch.tensor(bounds, dtype=offsets.dtype)
    if capacity is not None:
        filled = values.new_full((capacity, *x.shape[1:]), fill_value)
        filled[: min(capacity, values.shape[0])] = values[:capacity]
        values, new_offsets = filled, new_offsets.clamp(max=capacity)
    return values, new_offsets


def unpad(x: Tensor, attention_mask: Tensor) -> Tuple[Tensor, Tensor, Tensor, int]:
    """flash-attn's ``unpad_input``: ``(x_packed, indices, cu_seqlens, max_seqlen)``."""
    seqlens = attention_mask.sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(attention_mask.flatten(), as_tuple=False).flatten()
    max_seqlen = int(seqlens.max()) if seqlens.numel() else 0
    cu_seqlens = torch.nn.functional.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    rows = x.reshape(-1, *x.shape[2:])
    return rows[indices], indices, cu_seqlens, max_seqlen


def pad(x: Tensor, indices: Tensor, batch: int, seqlen: int) -> Tensor:
    """flash-attn's ``pad_input``: rows of ``x`` to positions ``indices`` of a zero grid."""
    out = x.new_zeros((batch * seqlen, *x.shape[1:]))
    out[indices] = x
    return out.view(batch, seqlen, *x.shape[1:])


def offsets_from_lengths(lengths: Tensor) -> Tensor:
    bounds = [0]
    for n in lengths.tolist():
        bounds.append(bounds[-1] + n)
    return torch.tensor(bounds, dtype=lengths.dtype)


def lengths_from_offsets(offsets: Tensor) -> Tensor:
    return torch.tensor([end - start for start, end in segments(int(offsets[-1]), offsets)], dtype=offsets.dtype)


def offsets_from_flags(flags: Tensor) -> Tensor:
    """Position 0 and every flagged position start a sequence."""
    starts = [p for p, f in enumerate(flags.tolist()) if f or p == 0]
    return torch.tensor(starts + [flags.shape[0]], dtype=torch.int64)


def flags_from_offsets(offsets: Tensor, total: int) -> Tensor:
    flags = torch.zeros(total, dtype=torch.bool)
    for start, end in segments(total, offsets):
        if end > start:
            flags[start] = True
    return flags


def segment_ids_from_offsets(offsets: Tensor, total: int) -> Tensor:
    ids = torch.empty(total, dtype=torch.int32)
    for k, (start, end) in enumerate(segments(total, offsets)):
        ids[start:end] = k
    return ids


# ---- reductions and histograms -------------------------------------------------------------

_REDUCE_IDENTITY = {"sum": 0, "mean": 0, "prod": 1, "logsumexp": float("-inf")}


def _reduce_one(x: Tensor, dim: int, op: str) -> Tensor:
    """One reduction of a non-empty ``x`` along ``dim`` (NaN propagates, as torch's do)."""
    if op == "sum":
        return x.sum(dim)
    if op == "mean":
        return x.mean(dim)
    if op == "prod":
        return x.prod(dim)
    if op == "logsumexp":
        return torch.logsumexp(x, dim)
    if op == "max":
        return x.amax(dim)
    if op == "min":
        return x.amin(dim)
    raise ValueError(op)


def _reduce_dtype(dtype: torch.dtype, op: str) -> torch.dtype:
    if op in ("sum", "prod") and not dtype.is_floating_point:
        return torch.int64
    return wide_dtype(dtype)


def _empty_value(op: str, dtype: torch.dtype):
    if op in _REDUCE_IDENTITY:
        return _REDUCE_IDENTITY[op]
    return identity(op, dtype)


def segment_reduce(x: Tensor, offsets: Tensor, op: str, dim: int = 0) -> Tensor:
    """``op`` over each sequence ``[offsets[k], offsets[k+1])`` along ``dim``, stacked along
    ``dim``; an empty sequence gives the op's identity (mean: 0). Floating results in float64."""
    dim = dim % x.dim()
    wide = x.to(_reduce_dtype(x.dtype, op)) if x.dtype != torch.bool or op in ("sum", "prod") else x
    outs = []
    for start, end in segments(x.shape[dim], offsets):
        piece = wide.narrow(dim, start, end - start)
        if end > start:
            outs.append(_reduce_one(piece, dim, op))
        else:
            shape = list(x.shape)
            del shape[dim]
            outs.append(torch.full(shape, _empty_value(op, x.dtype), dtype=wide.dtype))
    if not outs:
        shape = list(x.shape)
        shape[dim] = 0
        return torch.empty(shape, dtype=wide.dtype)
    return torch.stack(outs, dim)


def reduce(x: Tensor, dim: int, op: str, mask: Optional[Tensor] = None, keepdim: bool = False) -> Tensor:
    """``op`` along ``dim`` over the elements where ``mask`` (broadcast to ``x``) is True; a
    slice with none gives the op's identity (mean: 0). Floating results in float64."""
    x1 = x.reshape(1) if x.dim() == 0 else x
    d = dim % x1.dim()
    keep = torch.ones(x1.shape, dtype=torch.bool) if mask is None else mask.expand(x.shape).reshape(x1.shape)
    moved, keep = x1.movedim(d, -1), keep.movedim(d, -1)
    wide = moved.to(_reduce_dtype(x.dtype, op)) if x.dtype != torch.bool or op in ("sum", "prod") else moved
    out = torch.empty(moved.shape[:-1], dtype=wide.dtype)
    for index in torch.cartesian_prod(*[torch.arange(n) for n in moved.shape[:-1]]).reshape(-1, moved.dim() - 1) \
            if moved.dim() > 1 else [()]:
        index = tuple(int(i) for i in index)
        values = wide[index][keep[index]]
        out[index] = _reduce_one(values, 0, op) if values.numel() else _empty_value(op, x.dtype)
    out = out.unsqueeze(-1).movedim(-1, d) if keepdim or x.dim() == 0 else out
    return out.reshape(()) if x.dim() == 0 else out


def histogram(x: Tensor, bins: int, range: Tuple[float, float], weights: Optional[Tensor] = None,
              offsets: Optional[Tensor] = None) -> Tensor:
    """Counts (int64) or weight sums (float64) of ``x`` in ``bins`` equal-width bins over
    ``[lo, hi]``, the last bin closed; values outside and NaN skipped. The bin of a value is
    computed as the library does, in float32 (float64 for float64 ``x``), then counted exactly."""
    lo, hi = range
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    flat = x.reshape(-1).to(compute)
    lo_t, hi_t = torch.tensor(lo, dtype=compute), torch.tensor(hi, dtype=compute)
    inside = (flat >= lo_t) & (flat <= hi_t)
    bin_of = ((flat - lo_t) * bins / (hi_t - lo_t)).clamp(0, bins - 1)
    bin_of = torch.where(inside, bin_of, 0).to(torch.int64).clamp(max=bins - 1)
    w = None if weights is None else weights.reshape(-1).to(torch.float64)
    rows = []
    for start, end in segments(flat.shape[0], offsets):
        keep = inside[start:end]
        sel = bin_of[start:end][keep]
        rows.append(torch.bincount(sel, None if w is None else w[start:end][keep], minlength=bins))
    out = torch.stack(rows) if rows else torch.zeros(0, bins, dtype=torch.int64 if w is None else torch.float64)
    out = out.to(torch.int64 if w is None else torch.float64)
    return out if offsets is not None else out[0]
