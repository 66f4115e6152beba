"""The Mamba-1 mixer with mamba-ssm's parameters, on the library's fused selective scan."""
import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .. import reference
from ..ops.selective_scan import selective_scan, selective_state_update
from .conv import causal_conv1d

Tensor = torch.Tensor

SCAN_IMPLS = ("fused", "reference")


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of A, D, the delta bias and the states: float32, or float64 for float64 data."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _reference_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state, cu_seqlens):
    """``torch_parprims.reference.selective_scan`` (a float64 loop over time) in the op's dtypes."""
    out, last = reference.selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state,
                                         cu_seqlens)
    return out.to(u.dtype), last.to(_compute_dtype(u.dtype))


def _channels_first_linear(weight: Tensor, x: Tensor) -> Tensor:
    """``(batch, C_in, L)`` -> ``(batch, C_out, L)``, contiguous: ``weight @ x[b]`` for every
    batch row, as one batched GEMM over the rows with the weight broadcast (its gradient passes
    through a ``(batch, C_out, C_in)`` sum, small for the narrow projections here)."""
    return torch.bmm(weight.expand(x.shape[0], *weight.shape), x)


class Mamba(nn.Module):
    """The Mamba-1 mixer (mamba-ssm's ``Mamba``), trainable on packed variable-length batches.

    ``in_proj`` splits each token into x and the gate z; x goes through a depthwise causal
    convolution and SiLU, ``x_proj`` makes (dt, B, C) from it, ``dt_proj`` lifts dt back to
    ``d_inner`` channels, the selective scan (with D, the gate z, ``dt_proj.bias`` as delta bias
    and softplus) mixes along time, and ``out_proj`` maps back to ``d_model``.

    The parameters have mamba-ssm's names, shapes and initialization (``in_proj``, ``conv1d``,
    ``x_proj``, ``dt_proj``, ``A_log``, ``D``, ``out_proj``; ``A_log`` and ``D`` in float32 and
    marked ``_no_weight_decay``), so a mamba-ssm ``Mamba`` state_dict loads as it is and gives
    the same outputs.

    Args:
        d_model: the width of the tokens.
        d_state: N, the state size per channel.
        d_conv: the convolution's width.
        expand: ``d_inner = expand * d_model``.
        dt_rank: the rank of the dt projection; ``"auto"`` is ``ceil(d_model / 16)``.
        dt_min, dt_max, dt_init_floor: ``softplus(dt_proj.bias)`` starts log-uniform in
            ``[dt_min, dt_max]``, at least ``dt_init_floor``.
        dt_init, dt_scale: ``dt_proj.weight`` starts ``"random"`` (uniform in
            ``±dt_scale / sqrt(dt_rank)``) or ``"constant"`` (that bound).
        conv_bias, bias: biases of the convolution and of the in/out projections.
        layer_idx: the layer's index in a model (kept for mamba-ssm's generation utilities).
        scan_impl: ``"fused"`` (the library's ``selective_scan``) or ``"reference"`` (the
            pure-PyTorch ``torch_parprims.reference.selective_scan``, a float64 loop over time:
            slow, for comparisons).

    Shapes: ``forward(x)`` takes ``(batch, L, d_model)``; with ``cu_seqlens`` x is
    ``(1, total_tokens, d_model)`` holding sequences packed one after another, and the
    convolution and the scan restart at every sequence.

    Example::

        >>> block = Mamba(d_model=32)
        >>> lengths = torch.tensor([5, 11, 3])
        >>> cu = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
        >>> x = torch.randn(1, 19, 32)
        >>> y = block(x, cu_seqlens=cu)
        >>> alone = block(x[:, 5:16])
        >>> assert torch.allclose(y[:, 5:16], alone, atol=1e-5)
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        d_conv: int = 4,
        expand: int = 2,
        dt_rank="auto",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init: str = "random",
        dt_scale: float = 1.0,
        dt_init_floor: float = 1e-4,
        conv_bias: bool = True,
        bias: bool = False,
        layer_idx: Optional[int] = None,
        scan_impl: str = "fused",
        device=None,
        dtype=None,
    ):
        super().__init__()
        if scan_impl not in SCAN_IMPLS:
            raise ValueError(f"scan_impl: expected one of {SCAN_IMPLS}, got {scan_impl!r}")
        factory = {"device": device, "dtype": dtype}
        self.d_model = d_model
        self.d_state = d_state
        self.d_conv = d_conv
        self.expand = expand
        self.d_inner = int(expand * d_model)
        self.dt_rank = math.ceil(d_model / 16) if dt_rank == "auto" else dt_rank
        self.layer_idx = layer_idx
        self.scan_impl = scan_impl

        self.in_proj = nn.Linear(d_model, self.d_inner * 2, bias=bias, **factory)
        self.conv1d = nn.Conv1d(self.d_inner, self.d_inner, kernel_size=d_conv, groups=self.d_inner,
                                padding=d_conv - 1, bias=conv_bias, **factory)
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + 2 * d_state, bias=False, **factory)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner, bias=True, **factory)
        self._init_dt_proj(dt_init, dt_scale, dt_min, dt_max, dt_init_floor)

        # S4D-real initialization, A = -(1, 2, ..., N) for every channel; kept in float32.
        A = torch.arange(1, d_state + 1, dtype=torch.float32, device=device).repeat(self.d_inner, 1)
        self.A_log = nn.Parameter(torch.log(A))
        self.A_log._no_weight_decay = True
        self.D = nn.Parameter(torch.ones(self.d_inner, device=device))  # the skip, float32
        self.D._no_weight_decay = True
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=bias, **factory)

    def _init_dt_proj(self, dt_init, dt_scale, dt_min, dt_max, dt_init_floor):
        bound = self.dt_rank ** -0.5 * dt_scale  # keeps the variance of dt at initialization
        if dt_init == "constant":
            nn.init.constant_(self.dt_proj.weight, bound)
        elif dt_init == "random":
            nn.init.uniform_(self.dt_proj.weight, -bound, bound)
        else:
            raise ValueError(f"dt_init: expected 'random' or 'constant', got {dt_init!r}")
        # softplus(bias) = dt, log-uniform in [dt_min, dt_max]; the bias is softplus's inverse.
        log_dt = torch.rand(self.d_inner, device=self.dt_proj.bias.device) * (
            math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        dt = torch.exp(log_dt).clamp(min=dt_init_floor)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        self.dt_proj.bias._no_reinit = True  # model initializers that zero biases skip this one

    # The scan is fastest on inputs whose time steps are adjacent in memory (it then moves two
    # steps per load); a (batch, L, channels) activation viewed as (batch, channels, L) has them
    # `channels` apart (measured on an H200, the block's shapes in bfloat16: forward 3.4 ms on
    # such views, 1.7 ms time-contiguous). So the projections produce time-contiguous layouts.

    def _in_projection(self, hidden_states: Tensor) -> Tuple[Tensor, Tensor]:
        """x and z, ``(batch, d_inner, L)`` each, time-contiguous: one GEMM over every token,
        ``in_proj.weight @ hidden^T`` laid out ``(2 d_inner, batch * L)`` (mamba-ssm's layout)."""
        batch, length, _ = hidden_states.shape
        tokens = hidden_states.reshape(batch * length, self.d_model)
        xz = (self.in_proj.weight @ tokens.t()).view(2 * self.d_inner, batch, length).transpose(0, 1)
        if self.in_proj.bias is not None:
            xz = xz + self.in_proj.bias[:, None]
        return xz.chunk(2, dim=1)

    def _ssm_inputs(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """delta ``(batch, d_inner, L)`` (before its bias, which the scan adds) and B, C
        ``(batch, N, L)``, time-contiguous, from the convolution's output x."""
        x_dbl = _channels_first_linear(self.x_proj.weight, x)  # (batch, dt_rank + 2N, L)
        dt, B, C = torch.split(x_dbl, [self.dt_rank, self.d_state, self.d_state], dim=1)
        return _channels_first_linear(self.dt_proj.weight, dt), B, C

    def _ssm_params(self, dtype: torch.dtype):
        """A, D and the delta bias in the scan's parameter dtype."""
        cdt = _compute_dtype(dtype)
        return -torch.exp(self.A_log.to(cdt)), self.D.to(cdt), self.dt_proj.bias.to(cdt)

    def forward(self, hidden_states: Tensor, cu_seqlens: Optional[Tensor] = None,
                inference_cache: Optional[Tuple[Tensor, Tensor]] = None, *,
                sequence_parallel_group=None, sequence_parallel_schedule: str = "all_gather") -> Tensor:
        """``(batch, L, d_model)`` -> ``(batch, L, d_model)``.

        With ``cu_seqlens`` (int32 or int64, ``(S+1,)``, on x's device, flash-attn's
        convention) the batch must be 1 and holds S sequences packed along L; each output is
        what its sequence alone gives. No value is read back to the host.

        ``inference_cache``, a ``(conv_state, ssm_state)`` pair from
        :meth:`allocate_inference_cache` with one row per sequence (batch rows, or S with
        ``cu_seqlens``), makes this a prefill: the states after each sequence's last token are
        written into it, and :meth:`step` continues from there (the forward itself always
        starts from zero states).

        ``sequence_parallel_group`` (a ``torch.distributed`` process group;
        ``torch.distributed.group.WORLD`` for the default one) splits the time dimension
        across its ranks: ``hidden_states`` is this rank's contiguous slice of the tokens (rank
        order; any lengths, empty included) and the output is that slice of what one process
        gives on the whole sequence. The convolution reads the last ``d_conv - 1`` tokens
        before the slice from the ranks that hold them, and the scan passes its states from
        rank to rank (:mod:`torch_parprims.distributed`); with ``cu_seqlens``, pass the
        *global* offsets of the packed sequence (the same on every rank). Every rank must call
        it, and the backward; each rank's parameter gradients are its share, to be summed over
        the group (as data parallelism does). Not with ``inference_cache``.
        ``sequence_parallel_schedule`` is the scan's ``schedule`` (``"all_gather"`` or
        ``"pipeline"``, :func:`torch_parprims.distributed.selective_scan`).

        Example::

            >>> block = Mamba(d_model=32).eval()
            >>> prompts = torch.randn(1, 9, 32)                 # two prompts: 4 and 5 tokens
            >>> cache = block.allocate_inference_cache(batch_size=2)
            >>> _ = block(prompts, cu_seqlens=torch.tensor([0, 4, 9]), inference_cache=cache)
            >>> next_out, _, _ = block.step(torch.randn(2, 1, 32), *cache)   # both continue
        """
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.d_model:
            raise ValueError(f"hidden_states: expected (batch, L, {self.d_model}), got {tuple(hidden_states.shape)}")
        if cu_seqlens is not None and hidden_states.shape[0] != 1:
            raise ValueError(f"hidden_states: packed sequences (cu_seqlens given) need batch 1, "
                             f"got batch {hidden_states.shape[0]}")
        if sequence_parallel_group is not None:
            if inference_cache is not None:
                raise ValueError("inference_cache: not available with sequence_parallel_group")
            return self._forward_sequence_parallel(hidden_states, cu_seqlens, sequence_parallel_group,
                                                   sequence_parallel_schedule)
        x, z = self._in_projection(hidden_states)
        if inference_cache is not None:
            with torch.no_grad():
                inference_cache[0].copy_(self._last_conv_inputs(x, cu_seqlens))
        x = causal_conv1d(x, self.conv1d.weight[:, 0], self.conv1d.bias, cu_seqlens, activation="silu")
        delta, B, C = self._ssm_inputs(x)
        A, D, delta_bias = self._ssm_params(x.dtype)
        scan = selective_scan if self.scan_impl == "fused" else _reference_scan
        y, last_state = scan(x, delta, A, B, C, D, z, delta_bias, True, None, cu_seqlens)
        if inference_cache is not None:
            with torch.no_grad():
                inference_cache[1].copy_(last_state)
        return self.out_proj(y.transpose(1, 2))

    def _forward_sequence_parallel(self, hidden_states: Tensor, cu_seqlens: Optional[Tensor], group,
                                   schedule: str) -> Tensor:
        """forward's sequence-parallel path: the same steps, with the convolution and the scan
        of torch_parprims.distributed."""
        from .. import distributed

        if self.scan_impl != "fused":
            raise ValueError("sequence_parallel_group: needs scan_impl='fused'")
        x, z = self._in_projection(hidden_states)
        x = distributed.causal_conv1d(x, self.conv1d.weight[:, 0], self.conv1d.bias, cu_seqlens, "silu", group)
        local = None
        if cu_seqlens is not None:
            start = distributed.slice_start(x.shape[-1], group, device=x.device)
            local = distributed.local_cu_seqlens(cu_seqlens.to(torch.int64), start, x.shape[-1])
        delta, B, C = self._ssm_inputs(x)
        A, D, delta_bias = self._ssm_params(x.dtype)
        y, _ = distributed.selective_scan(x, delta, A, B, C, D, z, delta_bias, True, None, group, cu_seqlens=local,
                                          schedule=schedule)
        return self.out_proj(y.transpose(1, 2))

    def _last_conv_inputs(self, x: Tensor, cu_seqlens: Optional[Tensor]) -> Tensor:
        """The convolution's state after each sequence: its last ``d_conv`` inputs, zeros
        before the sequence's start; ``(rows, d_inner, d_conv)``."""
        length = x.shape[-1]
        if cu_seqlens is None:
            return F.pad(x, (self.d_conv - length, 0))  # a negative pad cuts from the left
        starts, ends = cu_seqlens[:-1].long(), cu_seqlens[1:].long()
        positions = ends[:, None] - self.d_conv + torch.arange(self.d_conv, device=x.device)  # (S, d_conv)
        inside = positions >= starts[:, None]
        if length == 0:
            return x.new_zeros(positions.shape[0], x.shape[1], self.d_conv)
        taken = x[0][:, positions.clamp(0, length - 1)]  # (d_inner, S, d_conv)
        return (taken * inside.to(x.dtype)).transpose(0, 1)

    def allocate_inference_cache(self, batch_size: int, max_seqlen: Optional[int] = None, dtype=None
                                 ) -> Tuple[Tensor, Tensor]:
        """Zeroed decoding states ``(conv_state, ssm_state)`` for ``batch_size`` sequences.

        ``conv_state`` is ``(batch, d_inner, d_conv)`` in ``dtype`` (default: the weights'),
        the last ``d_conv`` inputs of the convolution; ``ssm_state`` is
        ``(batch, d_inner, d_state)`` in float32 (float64 for float64 weights), as
        ``selective_state_update`` keeps it. ``max_seqlen`` is accepted for mamba-ssm's
        signature; the states do not grow with the length.
        """
        weight = self.conv1d.weight
        conv_dtype = weight.dtype if dtype is None else dtype
        conv_state = torch.zeros(batch_size, self.d_inner, self.d_conv, device=weight.device, dtype=conv_dtype)
        ssm_state = torch.zeros(batch_size, self.d_inner, self.d_state, device=weight.device,
                                dtype=_compute_dtype(self.dt_proj.weight.dtype))
        return conv_state, ssm_state

    @torch.no_grad()
    def step(self, hidden_states: Tensor, conv_state: Tensor, ssm_state: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        """One decoding step: ``(batch, 1, d_model)`` -> ``(out, conv_state, ssm_state)``.

        Updates both states in place (from :meth:`allocate_inference_cache`) and returns them,
        as mamba-ssm's ``Mamba.step``; T steps from zeroed states give what ``forward`` gives
        over those T tokens.

        Example::

            >>> block = Mamba(d_model=32).eval()
            >>> x = torch.randn(2, 6, 32)
            >>> conv_state, ssm_state = block.allocate_inference_cache(batch_size=2)
            >>> steps = [block.step(x[:, t:t + 1], conv_state, ssm_state)[0] for t in range(6)]
            >>> assert torch.allclose(torch.cat(steps, dim=1), block(x), atol=1e-5)
        """
        if hidden_states.dim() != 3 or hidden_states.shape[1] != 1:
            raise ValueError(f"hidden_states: expected (batch, 1, d_model), got {tuple(hidden_states.shape)}")
        dtype = hidden_states.dtype
        x, z = self.in_proj(hidden_states[:, 0]).chunk(2, dim=-1)  # (batch, d_inner) each
        # The convolution keeps its last d_conv inputs: shift left, append x, one dot product.
        conv_state.copy_(torch.roll(conv_state, shifts=-1, dims=-1))
        conv_state[:, :, -1] = x
        x = (conv_state * self.conv1d.weight[:, 0]).sum(-1)
        if self.conv1d.bias is not None:
            x = x + self.conv1d.bias
        x = F.silu(x).to(dtype)
        dt, B, C = torch.split(self.x_proj(x), [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = F.linear(dt, self.dt_proj.weight)  # the bias is added inside the update
        A, D, dt_bias = self._ssm_params(dtype)
        y = selective_state_update(ssm_state, x, dt, A, B, C, D, z=z, dt_bias=dt_bias, dt_softplus=True)
        return self.out_proj(y).unsqueeze(1), conv_state, ssm_state
