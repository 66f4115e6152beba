"""The pure-PyTorch reference stands alone; the package without its extension fails clearly."""
import ast
import os
import shutil
import subprocess
import sys

import torch_parprims

PACKAGE = os.path.dirname(os.path.abspath(torch_parprims.__file__))
REFERENCE = os.path.join(PACKAGE, "reference.py")


def _run(code, cwd):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


def test_reference_imports_only_torch():
    tree = ast.parse(open(REFERENCE).read())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "reference.py imports from its package"
            modules.add(node.module.split(".")[0])
    assert modules <= {"torch", "math", "typing"}, modules


# Loads a copy of reference.py by its path, with no extension next to it and the package itself
# unimportable, and runs every oracle once.
_LOAD_REFERENCE = r"""
import importlib.abc, importlib.util, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch_parprims":
            raise ImportError("torch_parprims is hidden in this test")

sys.meta_path.insert(0, Block())
import torch

spec = importlib.util.spec_from_file_location("parprims_reference", "reference.py")
ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)

x = torch.randn(3, 10)
assert torch.allclose(ref.scan(x, 1), x.double().cumsum(1))
o = torch.tensor([0, 4, 10])
assert torch.allclose(ref.segmented_scan(x, o, 1)[:, 4:], x[:, 4:].double().cumsum(1))
ref.scan_with_indices(x, o, 1, "max")
ref.scan_bicyclic(torch.randint(0, 3, (2, 10)), torch.randint(0, 3, (2, 10)), o, 1)
h, last = ref.affine_scan(0.5 * torch.ones(3, 10), x)
assert torch.equal(last, h[:, -1])
ref.matrix_affine_scan(torch.randn(10, 2, 2), torch.randn(10, 2), 0, None, o)
assert not any(m.split(".")[0] == "torch_parprims" for m in sys.modules)
assert not hasattr(torch.ops.parprims, "scan")  # no extension was loaded
print("reference ok")
"""


def test_reference_loads_by_path_without_the_extension(tmp_path):
    shutil.copy(REFERENCE, tmp_path / "reference.py")
    proc = _run(_LOAD_REFERENCE, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reference ok" in proc.stdout


def test_package_without_the_extension_raises_a_clear_import_error(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "torch_parprims",
                    ignore=shutil.ignore_patterns("_C*.so", "_C*.pyd", "__pycache__"))
    proc = _run("import torch_parprims", tmp_path)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ") and "_C" in last, proc.stderr  # says what is missing
