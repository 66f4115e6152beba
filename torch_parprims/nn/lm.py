"""A small Mamba language model: embedding, pre-norm residual Mamba blocks, tied head."""
import math
from typing import List, Optional, Tuple

import torch
import torch.nn as nn

from .mamba import Mamba

Tensor = torch.Tensor


class MambaBlock(nn.Module):
    """A pre-norm residual block: ``x + mixer(norm(x))``, with mamba-ssm's names.

    Args:
        d_model: the width of the tokens.
        layer_idx: the block's index in the model.
        norm_eps: the RMSNorm's epsilon.
        **mixer_kwargs: passed on to :class:`Mamba` (``d_state``, ``d_conv``, ``expand``, ...).

    Example::

        >>> block = MambaBlock(d_model=32)
        >>> assert block(torch.randn(2, 7, 32)).shape == (2, 7, 32)
    """

    def __init__(self, d_model: int, layer_idx: Optional[int] = None, norm_eps: float = 1e-5, device=None,
                 dtype=None, **mixer_kwargs):
        super().__init__()
        self.norm = nn.RMSNorm(d_model, eps=norm_eps, device=device, dtype=dtype)
        self.mixer = Mamba(d_model, layer_idx=layer_idx, device=device, dtype=dtype, **mixer_kwargs)

    def forward(self, x: Tensor, cu_seqlens: Optional[Tensor] = None,
                inference_cache: Optional[Tuple[Tensor, Tensor]] = None) -> Tensor:
        """``(batch, L, d_model)`` -> the same; ``cu_seqlens`` and ``inference_cache`` as in
        :meth:`Mamba.forward`."""
        return x + self.mixer(self.norm(x), cu_seqlens, inference_cache)

    def step(self, x: Tensor, conv_state: Tensor, ssm_state: Tensor) -> Tensor:
        """One decoding step, ``(batch, 1, d_model)``; the states are updated in place."""
        out, _, _ = self.mixer.step(self.norm(x), conv_state, ssm_state)
        return x + out


class MambaLM(nn.Module):
    """A Mamba language model: embedding, ``n_layer`` × (RMSNorm, Mamba, residual), final norm,
    and an output head tied to the embedding.

    Parameter names follow mamba-ssm's ``MambaLMHeadModel`` (``backbone.embedding``,
    ``backbone.layers.{i}.norm``, ``backbone.layers.{i}.mixer``, ``backbone.norm_f``,
    ``lm_head``) with RMSNorm, and so does the initialization (embedding ~ N(0, 0.02), linear
    biases zero but ``dt_proj``'s, each ``out_proj.weight`` scaled by ``1 / sqrt(n_layer)``).
    A mamba-ssm checkpoint built with ``rms_norm=True`` loads with the same ``d_model`` and
    ``n_layer`` and its vocabulary size after padding (``pad_vocab_size_multiple``).

    Args:
        vocab_size: the number of token ids.
        d_model: the width of the tokens.
        n_layer: the number of blocks.
        norm_eps: the RMSNorms' epsilon.
        **mixer_kwargs: passed on to every :class:`Mamba` (``d_state``, ``expand``,
            ``scan_impl``, ...).

    ``forward(input_ids, cu_seqlens=None)`` takes int64 ids ``(batch, L)`` and returns logits
    ``(batch, L, vocab_size)``; with ``cu_seqlens`` the ids are ``(1, total_tokens)``, sequences
    packed one after another, and each sequence sees only itself.

    Example::

        >>> model = MambaLM(vocab_size=16, d_model=32, n_layer=2)
        >>> ids = torch.randint(0, 16, (1, 12))
        >>> cu = torch.tensor([0, 4, 12])
        >>> logits = model(ids, cu_seqlens=cu)
        >>> assert torch.allclose(logits[:, 4:], model(ids[:, 4:]), atol=1e-5)
    """

    def __init__(self, vocab_size: int, d_model: int, n_layer: int, norm_eps: float = 1e-5, device=None,
                 dtype=None, **mixer_kwargs):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.backbone = nn.Module()
        self.backbone.embedding = nn.Embedding(vocab_size, d_model, **factory)
        self.backbone.layers = nn.ModuleList(
            MambaBlock(d_model, layer_idx=i, norm_eps=norm_eps, **factory, **mixer_kwargs) for i in range(n_layer))
        self.backbone.norm_f = nn.RMSNorm(d_model, eps=norm_eps, **factory)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False, **factory)
        self.lm_head.weight = self.backbone.embedding.weight
        self._init_weights(n_layer)

    def _init_weights(self, n_layer: int, initializer_range: float = 0.02) -> None:
        nn.init.normal_(self.backbone.embedding.weight, std=initializer_range)
        for module in self.modules():
            if isinstance(module, nn.Linear) and module.bias is not None and not getattr(module.bias, "_no_reinit",
                                                                                          False):
                nn.init.zeros_(module.bias)
        # Each block adds its out_proj's output to the residual stream: scale it down so that
        # the stream's variance does not grow with depth (GPT-2's scheme, as mamba-ssm does).
        for layer in self.backbone.layers:
            weight = layer.mixer.out_proj.weight
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
            with torch.no_grad():
                weight /= math.sqrt(n_layer)

    def forward(self, input_ids: Tensor, cu_seqlens: Optional[Tensor] = None,
                inference_cache: Optional[List[Tuple[Tensor, Tensor]]] = None) -> Tensor:
        """int64 ids ``(batch, L)`` -> logits ``(batch, L, vocab_size)``.

        With ``inference_cache`` (from :meth:`allocate_inference_cache`, one row per sequence)
        this is a prefill: every layer's states after each sequence's last token are written
        into it, for :meth:`step` to continue (see :meth:`Mamba.forward`).
        """
        x = self.backbone.embedding(input_ids)
        for i, layer in enumerate(self.backbone.layers):
            x = layer(x, cu_seqlens, None if inference_cache is None else inference_cache[i])
        return self.lm_head(self.backbone.norm_f(x))

    def allocate_inference_cache(self, batch_size: int, dtype=None) -> List[Tuple[Tensor, Tensor]]:
        """Zeroed ``(conv_state, ssm_state)`` of every layer, for :meth:`step`."""
        return [layer.mixer.allocate_inference_cache(batch_size, dtype=dtype) for layer in self.backbone.layers]

    @torch.no_grad()
    def step(self, input_ids: Tensor, cache: List[Tuple[Tensor, Tensor]]) -> Tensor:
        """One decoding step: ids ``(batch, 1)`` -> logits ``(batch, 1, vocab_size)``.

        ``cache`` (from :meth:`allocate_inference_cache`) is updated in place.

        Example::

            >>> model = MambaLM(vocab_size=16, d_model=32, n_layer=2).eval()
            >>> ids = torch.randint(0, 16, (3, 5))
            >>> cache = model.allocate_inference_cache(batch_size=3)
            >>> steps = torch.cat([model.step(ids[:, t:t + 1], cache) for t in range(5)], dim=1)
            >>> assert torch.allclose(steps, model(ids), atol=1e-4)
        """
        x = self.backbone.embedding(input_ids)
        for layer, (conv_state, ssm_state) in zip(self.backbone.layers, cache):
            x = layer.step(x, conv_state, ssm_state)
        return self.lm_head(self.backbone.norm_f(x))
