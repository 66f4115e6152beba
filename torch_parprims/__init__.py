"""torch_parprims: parallel primitives for sequence models, as PyTorch custom ops.

Every op is registered under ``torch.ops.parprims`` with CPU and CUDA kernels, a fake kernel
for ``torch.compile`` and autograd. The functions here are thin, documented wrappers.
"""
from ._loader import cuda_kernels_built, load_extension
from ._version import __version__

load_extension()

from .ops.checks import check_offsets, set_checks  # noqa: E402
from .ops.scan import scan, segmented_scan  # noqa: E402
from .ops.affine import affine_scan, matrix_affine_scan  # noqa: E402
from .ops.selective_scan import selective_scan, selective_scan_fn, selective_state_update  # noqa: E402
from .ops.compact import (  # noqa: E402
    compact,
    flags_from_offsets,
    lengths_from_offsets,
    offsets_from_flags,
    offsets_from_lengths,
    pad,
    segment_ids_from_offsets,
    segmented_compact,
    unpad,
)
from .ops.reduce import histogram, reduce, segment_reduce  # noqa: E402
from . import nn  # noqa: E402  (model layers; imports only torch and the ops above)
from . import distributed  # noqa: E402  (sequence parallel; needs a process group only when called)

__all__ = [
    "scan",
    "segmented_scan",
    "affine_scan",
    "matrix_affine_scan",
    "selective_scan",
    "selective_scan_fn",
    "selective_state_update",
    "compact",
    "segmented_compact",
    "unpad",
    "pad",
    "offsets_from_lengths",
    "lengths_from_offsets",
    "offsets_from_flags",
    "flags_from_offsets",
    "segment_ids_from_offsets",
    "segment_reduce",
    "reduce",
    "histogram",
    "check_offsets",
    "set_checks",
    "cuda_kernels_built",
    "nn",
    "distributed",
]
