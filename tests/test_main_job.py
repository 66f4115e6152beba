"""The main job (`python -m torch_parprims`) in its quick form: its checks pass on CPU against
torch_parprims.reference, and it prints a table."""
import subprocess
import sys

import pytest
import torch

import torch_parprims.__main__ as main_job

_DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="CUDA is not available"))]


@pytest.mark.parametrize("dev", _DEVICES)
def test_checks_pass_on_device(dev, capsys):
    assert main_job.run_checks(torch.device(dev), quick=True)
    out = capsys.readouterr().out
    assert "against torch_parprims.reference" in out and " 0 failed" in out


def test_main_quick_cpu(capsys):
    assert main_job.main(["--quick", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for op in ("scan add", "segmented_scan add", "affine_scan", "matrix_affine_scan"):
        assert op in out
    assert "Benchmarks on CPU" in out and "speed-up" in out


def test_progress_bar_writes_to_stderr(capsys):
    bar = main_job.Progress(4, "work")
    for i in range(4):
        bar.step(f"item {i}")
    bar.close()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "4/4" in captured.err and "#" in captured.err


def test_module_entry_point_runs():
    proc = subprocess.run([sys.executable, "-m", "torch_parprims", "--quick", "--device", "cpu", "--no-bench"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 failed" in proc.stdout
