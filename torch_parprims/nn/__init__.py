"""Model layers built on the library's ops: Mamba-1 blocks that train on packed batches.

- :func:`causal_conv1d`: the depthwise causal convolution of Mamba, restarting at every packed
  sequence.
- :class:`Mamba`: the Mamba-1 mixer with mamba-ssm's parameters, ``forward(x, cu_seqlens=None)``
  and ``step`` for decoding.
- :class:`MambaBlock`, :class:`MambaLM`: pre-norm residual blocks and a small language model.
"""
from .conv import causal_conv1d
from .lm import MambaBlock, MambaLM
from .mamba import Mamba

__all__ = ["causal_conv1d", "Mamba", "MambaBlock", "MambaLM"]
