"""Shared pytest configuration: the `device` parameter, per-test seeding, the checks switch.

Devices: ``--device cpu --device cuda`` (or ``--device cpu,cuda``), else the environment
variable ``PARPRIMS_TEST_DEVICES`` (comma separated), else ``cpu`` and ``cuda``. A CUDA
device without a GPU is skipped, never failed.
"""
import os
import shutil
import tempfile
import zlib

import pytest
import torch

import torch_parprims


def pytest_configure(config):
    # torch.compile's on-disk caches (FX graph, AOTAutograd) are keyed on the traced graphs, not
    # on the library's Python backward formulas: after a library change they can serve a stale
    # compiled backward. A fresh cache directory per session keeps the compile tests honest.
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        config._parprims_cache_dir = tempfile.mkdtemp(prefix="parprims-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = config._parprims_cache_dir


def pytest_unconfigure(config):
    cache = getattr(config, "_parprims_cache_dir", None)
    if cache:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        shutil.rmtree(cache, ignore_errors=True)


def pytest_addoption(parser):
    parser.addoption(
        "--device",
        action="append",
        default=None,
        help="device(s) to test, e.g. --device cpu --device cuda (default: $PARPRIMS_TEST_DEVICES or cpu,cuda)",
    )


def _devices(config):
    given = config.getoption("--device") or [os.environ.get("PARPRIMS_TEST_DEVICES", "cpu,cuda")]
    return [d.strip() for item in given for d in item.split(",") if d.strip()]


def pytest_generate_tests(metafunc):
    if "device" not in metafunc.fixturenames:
        return
    params = []
    for name in _devices(metafunc.config):
        marks = []
        if name.startswith("cuda") and not torch.cuda.is_available():
            marks.append(pytest.mark.skip(reason="CUDA is not available"))
        params.append(pytest.param(name, marks=marks, id=name))
    metafunc.parametrize("device", params)


@pytest.fixture(autouse=True)
def _seed_and_reset(request):
    """Fresh random inputs per test, reproducible from the test id; checks off afterwards."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    yield
    torch_parprims.set_checks(False)
