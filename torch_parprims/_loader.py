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
