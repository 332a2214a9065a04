"""The floors of the package: imports only go down, and no floor imports itself in a circle.

The package is two houses and the exercises, each built in floors that use only the
ones below (docs/layout.md shows the same order). The engine is the lower house: it
imports nothing of the application or the exercises.

    engine
     0  backend, errors, memory        arrays, error types and input checks, host memory
     1  device                         device primitives: scatter-add, row dot, generator
     2  dispatch                       each op's table and the choice of what runs
     3  ops, parity                    one file per op family; the parity harness
     4  nn                             modules: parameters, gradients, wiring
     5  models                         the Transformer, the language model, the classifier
     6  optim, decode                  Adam, schedules, clipping, loss scaling; decoding
     7  step, gradcheck(_report)       one optimizer step; the gradient checks
    app (and the exercises)
     8  errors, progress, compat,      the application's errors, progress display, older
        writer                         names and files still read, the one writer
     9  data                           vocabularies, tokenizers, batching, data sets
    10  checkpoint*, translate, bleu,  checkpoints; text in, text out; BLEU; plots;
        viz, export(_tokenizer),       the transformers export and import
        hf_import
    11  train, distributed             the one run loop and its tasks; data parallelism
    12  exercises                      graded and trained through the loop
    13  commands, cli, __main__        the command line

Every import counts, inside functions too (a function-local import is no way around a
floor). ``scratchformer/__init__.py`` is the package's front door: it may re-export from
any floor, and importing names from it (other than submodules) is for the top floor only.
Checked statically with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import scratchformer

PACKAGE = Path(scratchformer.__file__).resolve().parent

ENGINE = [
    {"engine", "engine.backend", "engine.errors", "engine.memory"},
    {"engine.device"},
    {"engine.dispatch"},
    {"engine.ops", "engine.parity"},
    {"engine.nn"},
    {"engine.models"},
    {"engine.optim", "engine.decode"},
    {"engine.step", "engine.gradcheck", "engine.gradcheck_report"},
]
APP = [
    {"app", "app.errors", "app.progress", "app.compat", "app.writer"},
    {"app.data"},
    {"app.checkpoint", "app.checkpoint_read", "app.checkpoint_fields", "app.translate",
     "app.bleu", "app.viz", "app.export", "app.export_tokenizer", "app.hf_import"},
    {"app.train", "app.distributed"},
    {"exercises"},
    {"app.commands", "app.cli", "__main__"},
]
FLOORS = ENGINE + APP
ROOT = "(package root)"


def module_names(package: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` for every .py file of the package."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = [package.name, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imports_of(path: Path, modules: dict[str, Path]):
    """(imported module, line) for every import of the package in the file, anywhere in
    it; ``from pkg.a import b`` names ``pkg.a.b`` when b is a module, else ``pkg.a``."""
    top = next(iter(modules)).split(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == top:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != top:
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield (sub if sub in modules else node.module), node.lineno


def floor_of(module: str, floors=FLOORS) -> int | str:
    """The floor of a dotted module name: by its first two components under the package
    (``engine.ops``), else its first (``exercises``)."""
    parts = module.split(".")
    if len(parts) == 1:
        return ROOT
    for key in (".".join(parts[1:3]), parts[1]):
        for i, names in enumerate(floors):
            if key in names:
                return i
    raise KeyError(module)


def upward_imports(package: Path, floors=FLOORS) -> list[str]:
    """Every import that goes up a floor (or into the package root from below the top)."""
    modules = module_names(package)
    top = len(floors) - 1
    found = []
    for name, path in modules.items():
        here = floor_of(name, floors)
        if here == ROOT:
            continue
        for target, line in imports_of(path, modules):
            there = floor_of(target, floors)
            if there == ROOT and here != top or there != ROOT and there > here:
                where = path.relative_to(package.parent).as_posix()
                found.append(f"{where}:{line} (floor {here}) imports {target} (floor {there})")
    return found


def cycles(package: Path, floors=FLOORS) -> list[list[str]]:
    """Circles of imports between modules (each circle once, from its smallest name)."""
    modules = module_names(package)
    graph = {
        name: sorted({t for t, _ in imports_of(path, modules) if t in modules and t != name})
        for name, path in modules.items()
    }
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == "open":
                circle = stack[stack.index(nxt) :]
                i = circle.index(min(circle))
                found.append(circle[i:] + circle[:i])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name, [])
    return [list(c) for c in {tuple(c) for c in found}]


# -- the package ----------------------------------------------------------------------------
def test_every_part_of_the_package_has_a_floor():
    unplaced = []
    for name in module_names(PACKAGE):
        if "." in name:
            try:
                floor_of(name)
            except KeyError:
                unplaced.append(name)
    assert not unplaced, f"give these a floor in FLOORS (and docs/layout.md): {unplaced}"


def engine_imports(package: Path) -> list[str]:
    """Every import by a module of the engine of a module outside it (the application, the
    exercises, the front door)."""
    modules = module_names(package)
    top = package.name
    found = []
    for name, path in modules.items():
        if not name.startswith(f"{top}.engine"):
            continue
        for target, line in imports_of(path, modules):
            if not target.startswith(f"{top}.engine"):
                where = path.relative_to(package.parent).as_posix()
                found.append(f"{where}:{line} imports {target}")
    return found


def test_the_engine_imports_nothing_of_the_application():
    found = engine_imports(PACKAGE)
    assert not found, "the engine imports outside itself:\n" + "\n".join(found)


def test_a_planted_import_of_the_application_in_the_engine_is_found(tmp_path):
    """A copy of the package with one import of the application planted in an op's file:
    both checks name it (its floor, and the engine's house)."""
    import shutil

    copy = tmp_path / PACKAGE.name
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "engine" / "ops" / "linear.py"
    target.write_text(target.read_text() + "\n\ndef _planted():\n"
                      f"    from {PACKAGE.name}.app import writer\n")
    where = f"{PACKAGE.name}/engine/ops/linear.py"
    assert any(f.startswith(where) and "imports" in f and ".app.writer" in f
               for f in upward_imports(copy))
    assert [f for f in engine_imports(copy) if f.startswith(where)]


def test_imports_only_go_down():
    found = upward_imports(PACKAGE)
    assert not found, "imports that go up a floor:\n" + "\n".join(found)


def test_no_import_cycles():
    found = cycles(PACKAGE)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c + c[:1]) for c in found)


def test_the_layout_page_lists_the_floors_in_order():
    """docs/layout.md numbers the parts of each house by the same floors."""
    section = (PACKAGE.parent / "docs" / "layout.md").read_text(encoding="utf-8")
    block = section[section.index("```") : section.index("```", section.index("```") + 3)]
    numbered = {}
    house, floor = "", None
    for line in block.splitlines()[2:]:
        head = re.match(r"  (engine|app|exercises)/ ", line)
        if head:
            house = head.group(1)
            if house == "exercises":
                numbered["exercises"] = int(re.search(r"  (\d+): ", line).group(1))
            continue
        m = re.match(r"    ( ?\d+) |       \S", line)
        if not m or not house:
            continue
        floor = int(m.group(1)) if m.group(1) else floor
        for name in re.findall(r"([a-z_]+)(?:\.py|/)", line[:28]):
            if name != "configs":  # package data, not a module
                numbered[f"{house}.{name}"] = floor
    want = {n: i for i, names in enumerate(FLOORS) for n in names
            if n not in ("__main__", "engine", "app")}
    assert numbered == want


# -- the checker itself ---------------------------------------------------------------------
def _tiny_package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "pkg"
    for rel, text in {"__init__.py": "", **files}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


TINY_FLOORS = [{"low"}, {"mid"}, {"high"}]


def test_the_checker_finds_an_upward_import_even_inside_a_function(tmp_path):
    pkg = _tiny_package(
        tmp_path,
        {
            "low.py": "def f():\n    from pkg.high import g\n",
            "mid/__init__.py": "",
            "mid/a.py": "from pkg import low\nfrom pkg.mid import b\n",
            "mid/b.py": "import pkg.low\n",
            "high.py": "from pkg.mid.a import x\ndef g(): pass\n",
        },
    )
    assert upward_imports(pkg, TINY_FLOORS) == ["pkg/low.py:2 (floor 0) imports pkg.high (floor 2)"]


def test_the_checker_finds_a_cycle_within_a_floor(tmp_path):
    pkg = _tiny_package(
        tmp_path,
        {
            "low.py": "",
            "mid/__init__.py": "",
            "mid/a.py": "from pkg.mid.b import y\n",
            "mid/b.py": "def y():\n    from pkg.mid import a\n",
            "high.py": "",
        },
    )
    assert upward_imports(pkg, TINY_FLOORS) == []
    assert cycles(pkg, TINY_FLOORS) == [["pkg.mid.a", "pkg.mid.b"]]


def test_the_checker_refuses_names_from_the_package_root_below_the_top(tmp_path):
    pkg = _tiny_package(
        tmp_path,
        {"low.py": "from pkg import __version__\n", "mid/__init__.py": "", "high.py": ""},
    )
    assert upward_imports(pkg, TINY_FLOORS) == [
        "pkg/low.py:1 (floor 0) imports pkg (floor (package root))"
    ]


@pytest.mark.parametrize("name, floor", [("pkg.low", 0), ("pkg.mid.a", 1), ("pkg", ROOT)])
def test_floor_of(name, floor):
    assert floor_of(name, TINY_FLOORS) == floor


#: the length past which a module is split (its parts named for what each holds)
MAX_LINES = 500


def test_no_module_of_the_package_is_over_500_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"split these modules (lines): {long}"
