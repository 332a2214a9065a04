"""The floors of the package: imports only go down, and no floor imports itself in a circle.

The package is built in floors, each using only the ones below it (docs/layout.md shows
the same order):

    0  backend, errors, progress,     arrays, error types, progress display, host memory,
       memory, compat, writer         older names and files still read, the one writer
    1  device                         device primitives: scatter-add, row dot, generator
    2  dispatch                       each op's table and the choice of what runs
    3  ops, parity                    one file per op family: the reference pairs, the
                                      faster forms, the registration; the parity harness
    4  nn                             modules: parameters, gradients, wiring
    5  models                         the Transformer, the language model, the classifier
    6  optim, data, decode            Adam and the schedule; data; decoding
    7  checkpoint, gradcheck, bleu,   checkpoints; gradient checks; BLEU; plots;
       viz, export                    the transformers export
    8  train, distributed, exercises  the one training loop and its tasks; data parallelism;
                                      the exercises, graded and trained through the loop
    9  commands, cli, __main__        the command line

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

FLOORS = [
    {"backend", "errors", "progress", "memory", "compat", "writer"},
    {"device"},
    {"dispatch"},
    {"ops", "parity"},
    {"nn"},
    {"models"},
    {"optim", "data", "decode"},
    {"checkpoint", "checkpoint_read", "checkpoint_fields", "gradcheck", "bleu", "viz", "export"},
    {"train", "distributed", "exercises"},
    {"commands", "cli", "__main__"},
]
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
    """The floor of a dotted module name: by its first component under the package."""
    parts = module.split(".")
    if len(parts) == 1:
        return ROOT
    for i, names in enumerate(floors):
        if parts[1] in names:
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
    parts = {n.split(".")[1] for n in module_names(PACKAGE) if "." in n}
    unplaced = sorted(p for p in parts if not any(p in f for f in FLOORS))
    assert not unplaced, f"give these a floor in FLOORS (and docs/layout.md): {unplaced}"


def test_imports_only_go_down():
    found = upward_imports(PACKAGE)
    assert not found, "imports that go up a floor:\n" + "\n".join(found)


def test_no_import_cycles():
    found = cycles(PACKAGE)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c + c[:1]) for c in found)


def test_the_layout_page_lists_the_floors_in_order():
    """docs/layout.md numbers the parts of the package by the same floors."""
    section = (PACKAGE.parent / "docs" / "layout.md").read_text(encoding="utf-8")
    block = section[section.index("```") : section.index("```", section.index("```") + 3)]
    numbered = {}
    floor = None
    for line in block.splitlines()[2:]:
        m = re.match(r"  (\d) |    \S", line)
        if not m:
            continue
        floor = int(m.group(1)) if m.group(1) else floor
        for name in re.findall(r"([a-z_]+)(?:\.py|/)", line[:24]):
            numbered[name] = floor
    want = {n: i for i, names in enumerate(FLOORS) for n in names if n not in ("__main__",)}
    if not any((PACKAGE / f"distributed{end}").exists() for end in (".py", "")):
        want.pop("distributed")  # a floor-8 name reserved for data parallelism
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
