"""Packaging: one version string, the public build query, the license file."""
import os
import re
import sys

import pytest

import torch_parprims

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.dirname(os.path.abspath(torch_parprims.__file__))

# PEP 440 public versions (release, optional pre-, post- and dev-release), e.g. 0.2.0.dev0.
PEP440 = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")


def test_version_is_the_version_file():
    with open(os.path.join(PACKAGE, "VERSION"), encoding="utf-8") as f:
        written = f.read().strip()
    assert torch_parprims.__version__ == written
    assert PEP440.match(written), written


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is new in Python 3.11")
def test_pyproject_reads_the_version_file():
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        meta = tomllib.load(f)
    assert "version" not in meta["project"]
    assert "version" in meta["project"]["dynamic"]
    assert meta["tool"]["setuptools"]["dynamic"]["version"] == {"file": "torch_parprims/VERSION"}
    assert os.path.samefile(os.path.join(ROOT, "torch_parprims", "VERSION"), os.path.join(PACKAGE, "VERSION"))


def test_cuda_kernels_built_is_a_bool():
    built = torch_parprims.cuda_kernels_built()
    assert isinstance(built, bool)
    assert "cuda_kernels_built" in torch_parprims.__all__


def test_license_exists():
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        text = f.read()
    assert "BSD 3-Clause License" in text
    assert "2026 The torch_parprims authors" in text
