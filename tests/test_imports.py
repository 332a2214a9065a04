"""Import discipline, checked statically with ``ast``.

Only scratchformer/engine/backend.py may import numpy, cupy or cupyx (in any form: ``import
numpy as np``, ``from numpy import x``, ``import cupyx.scipy``, inside a function too),
so that switching the array backend really switches everything; besides it, only the
CuPy files (``engine/device/cupy_*.py``) import cupy or
cupyx, and nothing else. No module may import an
autodiff framework: every backward pass is written by hand. (Imports built from strings
via importlib are out of scope.)
"""

import ast
from pathlib import Path

import pytest

import scratchformer

PACKAGE = Path(scratchformer.__file__).resolve().parent
ARRAY_MODULES = {"numpy", "cupy", "cupyx"}
FORBIDDEN = {"torch", "jax", "jaxlib", "autograd", "tensorflow"}
BACKEND = PACKAGE / "engine" / "backend.py"


def imported_roots(path: Path):
    """(top-level module name, line) for every absolute import in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0], node.lineno


SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_the_walk_finds_the_package():
    """Sanity: the package's ops, modules and backend are all parsed."""
    names = {p.relative_to(PACKAGE).as_posix() for p in SOURCES}
    assert {"engine/backend.py", "engine/gradcheck.py", "engine/ops/attention.py",
            "engine/nn/layers.py"} <= names
    assert "numpy" in {root for root, _ in imported_roots(BACKEND)}


def test_the_checker_recognises_every_import_form(tmp_path):
    """Sanity: each import form counts; relative imports and strings do not."""
    src = tmp_path / "m.py"
    src.write_text(
        "import numpy as np\n"
        "from numpy import zeros\n"
        "import cupyx.scipy\n"
        "def f():\n    import cupy\n"
        "from . import numpy\n"
        "import importlib; importlib.import_module('torch')\n"
    )
    assert sorted(r for r, _ in imported_roots(src)) == [
        "cupy",
        "cupyx",
        "importlib",
        "numpy",
        "numpy",
    ]


def is_cupy_side(path: Path) -> bool:
    """A file of the CuPy side: ``engine/device/cupy_*.py``."""
    rel = path.relative_to(PACKAGE)
    return rel.parts[:2] == ("engine", "device") and rel.name.startswith("cupy_")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_only_backend_imports_array_modules(path):
    """Every array operation goes through scratchformer.engine.backend (xp, np, asarray ...);
    the seam's CuPy files may import cupy and cupyx (never numpy)."""
    if path == BACKEND:
        return
    allowed = {"cupy", "cupyx"} if is_cupy_side(path) else set()
    found = [
        f"{name} (line {line})"
        for name, line in imported_roots(path)
        if name in ARRAY_MODULES - allowed
    ]
    where = path.relative_to(PACKAGE)
    assert not found, f"{where} imports {found}: use scratchformer.engine.backend"


def test_the_cupy_side_is_where_the_seam_says():
    """Sanity: the device primitives' CuPy file counts as the CuPy side, ops do not."""
    assert is_cupy_side(PACKAGE / "engine" / "device" / "cupy_device.py")
    assert not is_cupy_side(PACKAGE / "engine" / "ops" / "attention.py")
    assert not is_cupy_side(PACKAGE / "engine" / "device" / "numpy_device.py")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_autodiff_framework(path):
    """No torch, jax, autograd or tensorflow: gradients are derived by hand."""
    found = [f"{name} (line {line})" for name, line in imported_roots(path) if name in FORBIDDEN]
    assert not found, f"{path.relative_to(PACKAGE)} imports {found}"
