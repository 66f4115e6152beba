"""Loads the compiled extension, which registers every op under torch.ops.parprims."""
import glob
import os

import torch


def load_extension():
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = sorted(glob.glob(os.path.join(here, "_C*.so")) + glob.glob(os.path.join(here, "_C*.pyd")))
    if not candidates:
        raise ImportError(
            "torch_parprims: the compiled extension _C was not found next to the package; "
            "build it with `pip install --no-build-isolation -e .`"
        )
    torch.ops.load_library(candidates[0])


def cuda_kernels_built() -> bool:
    """Whether the compiled extension registered CUDA kernels.

    True when this build of torch_parprims was compiled with its CUDA kernels (``nvcc`` was
    found and ``PARPRIMS_CUDA`` was not ``0``); False for a CPU-only build, whose ops refuse
    CUDA tensors. It says nothing about whether a GPU is present: check
    ``torch.cuda.is_available()`` for that.
    """
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key("parprims::scan", "CUDA"))
