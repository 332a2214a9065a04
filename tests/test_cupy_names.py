"""Every name the package calls on the array module, every array method, and every method
of the device's dropout generator exists on CuPy, with the keywords the package passes.

Read statically from the package's source (``ast``) and checked against the ``cupy``
module, which imports on a machine without a GPU: a misspelt ``xp.`` name or a keyword
CuPy does not take is found here, not on the first GPU run. Skipped without CuPy, failed
under CI=true (CI installs it).
"""

from __future__ import annotations

import ast
import inspect
import os
import re
from pathlib import Path

import numpy as np
import pytest

import scratchformer
from scratchformer.engine.device.counter import CounterGenerator

PACKAGE = Path(scratchformer.__file__).resolve().parent
#: keywords every CuPy ufunc takes (``ufunc.__call__`` has no inspectable signature)
UFUNC_KEYWORDS = {"out", "dtype", "casting"}
#: a dropout generator's name in the package's code, and where device generators are used
#: (elsewhere ``rng`` is a host generator: data order, initialisation, sampling)
GENERATOR_NAMES = {"rng", "gen", "replay", "generator"}
GENERATOR_FLOORS = ("engine/ops/", "engine/device/")
#: where the package's array code is (elsewhere ``x.dumps()`` is json's, not an array's)
ARRAY_CODE = ("engine/", "app/train/records.py")


def cupy_module():
    try:
        import cupy
    except ImportError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CuPy cannot be imported in CI: {e}")
        pytest.skip(f"CuPy is not installed here ({e})")
    return cupy


def _chain(node):
    """``['xp', 'random', 'default_rng']`` for ``xp.random.default_rng``, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def uses(source: str):
    """``(kind, name, keywords, line)`` for each use in ``source``: ``xp`` (a name of the
    array module, dotted), ``method`` (``obj.name(...)``) and ``generator`` (a method
    called on a dropout generator)."""
    tree = ast.parse(source)
    calls = {id(n.func): n for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain = _chain(node)
        call = calls.get(id(node))
        keywords = tuple(k.arg for k in call.keywords if k.arg) if call else ()
        if chain and chain[0] == "xp":
            yield "xp", ".".join(chain[1:]), keywords, node.lineno
        elif call is not None:
            yield "method", node.attr, keywords, node.lineno
            if chain and len(chain) == 2 and chain[0] in GENERATOR_NAMES:
                yield "generator", node.attr, keywords, node.lineno


def all_uses():
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for use in uses(path.read_text()):
            if use[0] == "generator" and not where.startswith(GENERATOR_FLOORS):
                continue
            if use[0] == "method" and not where.startswith(ARRAY_CODE):
                continue
            yield where, *use


def _signature_in_doc(fn) -> set | None:
    """The keywords of a compiled (Cython) function from the signature its docstring
    starts with, ``_ndarray_base.sum(self, axis=None, ..., keepdims=False)``."""
    first = (getattr(fn, "__doc__", None) or "").strip().splitlines()[:1]
    m = re.match(r"^[\w.]+\((.*)\)", first[0]) if first else None
    if m is None:
        return None
    try:
        args = ast.parse(f"def f({m.group(1)}): pass").body[0].args
    except SyntaxError:
        return None
    if args.kwarg is not None:
        return None
    return {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}


def _keywords_taken(fn) -> set | None:
    """The keyword names ``fn`` takes, or None when it takes any (or cannot be read)."""
    if isinstance(fn, np.ufunc) or type(fn).__name__ == "ufunc":
        return UFUNC_KEYWORDS
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return _signature_in_doc(fn)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def _resolve(module, dotted: str):
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def problems(cupy) -> tuple[list[str], int]:
    """What CuPy lacks, and how many distinct uses were checked."""
    missing, checked = [], set()
    for where, kind, name, keywords, line in all_uses():
        if kind == "method" and not hasattr(np.ndarray, name):
            continue  # not an array method
        key = (kind, name, keywords)
        if key in checked:
            continue
        checked.add(key)
        owner = {"xp": cupy, "method": cupy.ndarray, "generator": CounterGenerator}[kind]
        try:
            fn = _resolve(owner, name)
        except AttributeError:
            missing.append(f"{where}:{line}: {kind} {name} does not exist on {owner.__name__}")
            continue
        taken = _keywords_taken(fn) if callable(fn) else None
        bad = [k for k in keywords if taken is not None and k not in taken]
        if bad:
            missing.append(f"{where}:{line}: {kind} {name} takes no keyword {bad}")
    return missing, len(checked)


def test_every_name_the_package_calls_exists_on_cupy(capsys):
    cupy = cupy_module()
    missing, checked = problems(cupy)
    assert not missing, "\n".join(missing)
    kinds = {k for _, k, *_ in all_uses()}
    assert kinds == {"xp", "method", "generator"} and checked > 50
    with capsys.disabled():
        print(f"\nCuPy {cupy.__version__}: {checked} names, methods and keywords checked,", end="")
        print(" none missing")


def test_a_misspelt_name_and_a_wrong_keyword_are_found(tmp_path, monkeypatch):
    """The check is not vacuous: a planted ``xp.exponent`` and ``sum(keepdim=True)``."""
    cupy = cupy_module()
    planted = PACKAGE / "ops" / "_planted_for_test.py"
    monkeypatch.setattr(
        "test_cupy_names.all_uses",
        lambda: (("ops/_planted_for_test.py", *u) for u in uses(
            "from scratchformer.engine.backend import xp\n"
            "def f(x):\n    return xp.exponent(x).sum(keepdim=True)\n"
        )),
    )
    missing, _ = problems(cupy)
    assert not planted.exists()
    assert any("xp exponent does not exist" in m for m in missing), missing
    assert any("method sum takes no keyword ['keepdim']" in m for m in missing), missing
