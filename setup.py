"""Builds torch_parprims._C, the one extension module that registers every op.

CUDA kernels are compiled when nvcc is found (for TORCH_CUDA_ARCH_LIST, default "8.0;9.0")
unless PARPRIMS_CUDA=0. Set MAX_JOBS to bound the parallel compile jobs.
"""
import glob
import os
import shutil
import sys

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def want_cuda():
    flag = os.environ.get("PARPRIMS_CUDA")
    if flag is not None:
        return flag not in ("0", "", "false", "False")
    from torch.utils.cpp_extension import CUDA_HOME

    return CUDA_HOME is not None and (shutil.which("nvcc") or os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc")))


def sources(pattern):
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))


# Link the C++ runtime by its shared library's name. A relocated g++ whose own library directory
# holds only the static libstdc++.a (it comes first on the search path) otherwise puts a private
# copy of libstdc++ into the module; with -Bsymbolic-functions, from Debian and Ubuntu Python's
# link flags, the module then calls that copy's uninitialized stream code, and the first error
# message that formats a number crashes the process. Naming the shared library resolves every
# libstdc++ symbol from it before the driver's archive is scanned.
LINK = ["-l:libstdc++.so.6"] if sys.platform.startswith("linux") else []


def openmp_flags():
    """-fopenmp where torch runs its CPU threads on OpenMP (Linux wheels). ATen's parallel_for is
    inline: in a file compiled without OpenMP it runs on the calling thread alone, so every CPU
    kernel would use one core. The module then needs libgomp.so.1, which torch has loaded
    already, so both share one thread pool (and torch.set_num_threads)."""
    import torch

    return ["-fopenmp"] if sys.platform.startswith("linux") and torch.backends.openmp.is_available() else []


def extension():
    from torch.utils import cpp_extension

    omp = openmp_flags()
    cxx = ["-O3"] + omp
    srcs = sources("csrc/registration.cpp") + sources("csrc/host/*.cpp") + sources("csrc/cpu/*.cpp")
    if not want_cuda():
        return cpp_extension.CppExtension(
            "torch_parprims._C", srcs, extra_compile_args={"cxx": cxx + ["-DPARPRIMS_CUDA=0"]},
            extra_link_args=LINK + omp,
        )
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    nvcc = ["-O3", "-lineinfo", "--threads=2", "-DPARPRIMS_CUDA=1"]
    return cpp_extension.CUDAExtension(
        "torch_parprims._C",
        srcs + sources("csrc/cuda/*.cpp") + sources("csrc/cuda/*.cu"),
        extra_compile_args={"cxx": cxx + ["-DPARPRIMS_CUDA=1"], "nvcc": nvcc},
        extra_link_args=LINK + omp,
    )


def build_ext():
    from torch.utils.cpp_extension import BuildExtension

    return BuildExtension.with_options(use_ninja=True)


setup(
    packages=find_packages(include=["torch_parprims", "torch_parprims.*"]),
    ext_modules=[extension()],
    cmdclass={"build_ext": build_ext()},
    python_requires=">=3.9",
)
