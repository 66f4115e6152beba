"""The engine's hot row-loop kernels keep their runs in registers.

A thread's run indexed by a value known only at run time goes to local memory, which no
result shows: affine_scan's backward ran 17 % slower that way on an H200 before it was found
(benchmarks/NOTES.md). This compiles the stand-alone harness of the affine kernels
(benchmarks/kernel_variants/affine_kernels.cu, about 15 s) for sm_90 and reads ptxas's report:
the row loop's affine instances must have no stack frame beyond a few spilled registers (a
stack frame holds arrays in local memory and spilled registers). Needs nvcc, as the CUDA build
does; skipped without it.
"""
import os
import re
import shutil
import subprocess

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, "benchmarks", "kernel_variants", "affine_kernels.cu")
# What torch's BuildExtension adds to the extension's nvcc flags.
_EXTENSION_DEFINES = ("-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
                      "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__")


def _nvcc():
    from torch.utils.cpp_extension import CUDA_HOME

    found = shutil.which("nvcc")
    if found is None and CUDA_HOME is not None and os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc")):
        found = os.path.join(CUDA_HOME, "bin", "nvcc")
    return found


def _stack_frames(ptxas_report):
    """Mangled kernel name -> (bytes of stack frame, bytes of spill stores), from `-Xptxas -v`."""
    frames, entry = {}, None
    for line in ptxas_report.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            entry = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", line)
        if m and entry is not None:
            frames[entry] = (int(m.group(1)), int(m.group(2)))
            entry = None
    return frames


@pytest.mark.skipif(_nvcc() is None, reason="needs nvcc")
def test_affine_row_kernels_have_no_stack_frame(tmp_path):
    include = os.path.join(os.path.dirname(torch.__file__), "include")
    cmd = [_nvcc(), "-O3", "-std=c++17", "-gencode", "arch=compute_90,code=sm_90", "-Xptxas", "-v",
           "--expt-relaxed-constexpr", "-DPARPRIMS_CUDA=1", *_EXTENSION_DEFINES, f"-I{include}",
           f"-I{os.path.join(ROOT, 'csrc')}",
           "-c", HARNESS, "-o", str(tmp_path / "affine_kernels.o")]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    frames = _stack_frames(done.stderr)
    # row_scan_kernel<AffineGradProblem<float...>> / <BFloat16 ...>, and the bfloat16 forward, with
    # the stack frame each may have. The backward, capped at 96 registers for ten blocks an SM,
    # spills a few registers (24 bytes of frame): that ran faster than 128 registers without
    # spills at eight blocks an SM (benchmarks/NOTES.md). Its frame must hold spills alone (no
    # larger than the bytes of spill stores; a run in local memory has none) and stay that small.
    wanted = {
        "backward float32": ("row_scan_kernelINS_17AffineGradProblemIfffEELb0ELb0EEE", 32),
        "backward bfloat16": ("row_scan_kernelINS_17AffineGradProblemIN3c108BFloat16EffEELb0ELb0EEE", 32),
        "forward bfloat16": ("row_scan_kernelINS_13AffineProblemIN3c108BFloat16EffEELb0ELb0EEE", 0),
    }
    for what, (fragment, most) in wanted.items():
        found = [(name, sizes) for name, sizes in frames.items() if fragment in name]
        assert len(found) == 1, f"{what}: expected one kernel matching {fragment}, found {found}"
        frame, spill_stores = found[0][1]
        assert frame <= min(most, spill_stores) or frame == 0, \
            f"{what}: {frame} bytes of stack frame for {spill_stores} bytes of spill stores (a run in local memory?)"
