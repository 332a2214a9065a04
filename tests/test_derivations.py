"""docs/derivations.md and the code it derives name each other, and the file is clean text.

Each section of the derivations that derives code starts with a ``Code:`` line of
backquoted links, ``path::function`` or ``path::Class.method`` (paths from the repository
root). Checked here, without importing anything (the sources are read with ``ast``):

1. every link resolves: the file exists and defines that function, or that class with
   that method (defined in it or inherited from a base class);
2. every public forward/backward op of ``scratchformer/engine/ops/`` (a module-level function
   named ``*_forward``, ``*_backward``, or an in-place ``*_forward_`` / ``*_backward_``)
   is linked from some section;
3. the file holds no control character other than newline (a ``\\t`` or ``\\b`` of LaTeX
   read as an escape becomes a TAB or a backspace);
4. every ``##`` section has a ``Code:`` line, except those that derive no code.

The last tests run the same checkers on a small synthetic document and source tree with
one deliberate violation each, to show that the checkers report it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "derivations.md"
OPS = ROOT / "scratchformer" / "engine" / "ops"

#: `path/to/file.py::name` or `path/to/file.py::Class.method`, backquoted
LINK = re.compile(r"`([\w./-]+\.py)::([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)`")
#: a public forward/backward op, in-place variants (trailing underscore) included
OP_NAME = re.compile(r"^[A-Za-z]\w*_(?:forward|backward)_?$")
#: every C0 control character but newline, and DEL
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")
#: what Python makes of the escapes that start LaTeX commands (\top, \boxed, \frac, ...)
ESCAPES = {"\t": "\\t", "\b": "\\b", "\f": "\\f", "\v": "\\v", "\a": "\\a", "\r": "\\r"}
#: sections that derive no code and so have no ``Code:`` line
SECTIONS_WITHOUT_CODE = frozenset({"Conventions", "Pitfalls"})


# -- the checkers ------------------------------------------------------------------------
def links(text: str) -> list[tuple[int, str, str]]:
    """``(line number, path, name)`` of every ``path::name`` link in ``text``."""
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        out.extend((lineno, m.group(1), m.group(2)) for m in LINK.finditer(line))
    return out


class _Module:
    """What one source file defines: functions, classes with their methods and bases, and
    the names it imports (``from package.module import Name``)."""

    def __init__(self, source: str):
        self.functions, self.classes, self.imports = set(), {}, {}
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.add(node.name)
            elif isinstance(node, ast.ClassDef):
                methods = {
                    item.name
                    for item in node.body
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                }
                bases = [b.id for b in node.bases if isinstance(b, ast.Name)]
                self.classes[node.name] = (methods, bases)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (node.module, alias.name)


class Resolver:
    """Whether ``path::name`` names a function or ``Class.method`` of a file under ``root``.

    A method counts when the class defines it or inherits it from a base class defined in
    the same file or imported from a module under ``root`` (``EncoderLayer.backward`` when
    ``EncoderLayer`` subclasses the layer class that defines ``backward``).
    """

    def __init__(self, root: Path):
        self.root, self._modules = root, {}

    def module(self, path: str) -> _Module | None:
        if path not in self._modules:
            file = self.root / path
            ok = file.is_file()
            self._modules[path] = _Module(file.read_text(encoding="utf-8")) if ok else None
        return self._modules[path]

    def has_method(self, path: str, cls: str, method: str, seen=None) -> bool:
        seen = set() if seen is None else seen
        mod = self.module(path)
        if mod is None or (path, cls) in seen:
            return False
        seen.add((path, cls))
        if cls not in mod.classes:
            if cls in mod.imports:  # a base class imported from another module
                module, name = mod.imports[cls]
                return self.has_method(module.replace(".", "/") + ".py", name, method, seen)
            return False
        methods, bases = mod.classes[cls]
        return method in methods or any(self.has_method(path, b, method, seen) for b in bases)

    def resolves(self, path: str, name: str) -> bool:
        mod = self.module(path)
        if mod is None:
            return False
        if "." in name:
            cls, method = name.split(".")
            return cls in mod.classes and self.has_method(path, cls, method)
        return name in mod.functions or name in mod.classes


def unresolved_links(text: str, root: Path) -> list[str]:
    """One message per link whose file is missing or does not define the name."""
    problems, resolver = [], Resolver(root)
    for lineno, path, name in links(text):
        if resolver.module(path) is None:
            problems.append(f"line {lineno}: {path}::{name}: no file {path}")
        elif not resolver.resolves(path, name):
            problems.append(f"line {lineno}: {path}::{name}: {path} defines no {name}")
    return problems


def op_functions(ops_dir: Path, root: Path) -> list[str]:
    """``path::name`` of every public forward/backward op in ``ops_dir`` (sorted)."""
    found = []
    for file in sorted(ops_dir.glob("*.py")):
        rel = file.relative_to(root).as_posix()
        for node in ast.parse(file.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and OP_NAME.match(node.name):
                found.append(f"{rel}::{node.name}")
    return found


def unlinked_ops(text: str, ops_dir: Path, root: Path) -> list[str]:
    """The ops of ``ops_dir`` that no link in ``text`` names."""
    linked = {f"{path}::{name}" for _, path, name in links(text)}
    return [op for op in op_functions(ops_dir, root) if op not in linked]


def control_characters(text: str) -> list[str]:
    """One message per control character other than newline: line, column, code point
    and, for those that a lost backslash makes, the escape it came from."""
    problems = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        for m in CONTROL.finditer(line):
            ch = m.group()
            was = f" (a lost backslash: {ESCAPES[ch]})" if ch in ESCAPES else ""
            problems.append(
                f"line {lineno}, column {m.start() + 1}: U+{ord(ch):04X}{was} "
                f"in {line.strip()[:60]!r}"
            )
    return problems


def sections(text: str) -> list[tuple[int, str, str]]:
    """``(line number, title, body)`` of every ``##`` section (fenced code skipped)."""
    out, fenced = [], False
    for lineno, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("## "):
            out.append([lineno, line[3:].strip(), []])
        elif out:
            out[-1][2].append(line)
    return [(n, title, "\n".join(body)) for n, title, body in out]


def sections_without_code(text: str, exempt=SECTIONS_WITHOUT_CODE) -> list[str]:
    """The sections (not in ``exempt``) without a ``Code:`` line holding a link."""
    missing = []
    for lineno, title, body in sections(text):
        paragraphs = re.split(r"\n\s*\n", body)
        has_code = any(p.lstrip().startswith("Code:") and LINK.search(p) for p in paragraphs)
        if title not in exempt and not has_code:
            missing.append(f"line {lineno}: ## {title}")
    return missing


def _report(what: str, problems: list[str]) -> str:
    return f"{DOC.relative_to(ROOT)}: {what} ({len(problems)}):\n  " + "\n  ".join(problems)


# -- the real document -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def doc_text() -> str:
    return DOC.read_text(encoding="utf-8")


def test_every_link_resolves(doc_text):
    assert links(doc_text), "no path::name links found: has the Code: line format changed?"
    problems = unresolved_links(doc_text, ROOT)
    assert not problems, _report("links that do not resolve", problems)


def test_every_op_is_linked(doc_text):
    assert op_functions(OPS, ROOT), f"no forward/backward ops found in {OPS}"
    problems = unlinked_ops(doc_text, OPS, ROOT)
    assert not problems, _report(
        "forward/backward ops not linked from any section (add them to a Code: line)",
        problems,
    )


def test_no_control_characters(doc_text):
    problems = control_characters(doc_text)
    assert not problems, _report("control characters (a lost backslash?)", problems)


def test_every_section_names_its_code(doc_text):
    problems = sections_without_code(doc_text)
    assert not problems, _report(
        f"sections without a Code: line (exempt: {sorted(SECTIONS_WITHOUT_CODE)})", problems
    )


# -- the checkers themselves, on a synthetic tree ----------------------------------------
@pytest.fixture
def tree(tmp_path) -> Path:
    """``pkg/ops/thing.py`` with a forward/backward pair, an in-place backward, a private op
    and a helper; ``pkg/mod.py`` with a class."""
    ops = tmp_path / "pkg" / "ops"
    ops.mkdir(parents=True)
    (ops / "thing.py").write_text(
        "def thing_forward(x):\n    return x\n\n\n"
        "def thing_backward(d):\n    return d\n\n\n"
        "def thing_backward_(d):\n    return d\n\n\n"
        "def _hidden_forward(x):\n    return x\n\n\n"
        "def helper(x):\n    return x\n",
        encoding="utf-8",
    )
    (tmp_path / "pkg" / "mod.py").write_text(
        "class Layer:\n    def backward(self, d):\n        return d\n\n\n"
        "class Inner(Layer):\n    pass\n",
        encoding="utf-8",
    )
    (tmp_path / "pkg" / "sub.py").write_text(
        "from pkg.mod import Layer\n\n\nclass Outer(Layer):\n    pass\n", encoding="utf-8"
    )
    return tmp_path


GOOD_DOC = """# Doc

## Conventions

Links are `path::name`.

## Thing

Code: `pkg/ops/thing.py::thing_forward`, `pkg/ops/thing.py::thing_backward`,
`pkg/ops/thing.py::thing_backward_`

The derivation.

## Layer

Code: `pkg/mod.py::Layer.backward`, `pkg/mod.py::Inner.backward`, `pkg/sub.py::Outer.backward`
"""


def test_checkers_pass_a_correct_document(tree):
    assert len(links(GOOD_DOC)) == 6
    assert unresolved_links(GOOD_DOC, tree) == []
    assert unlinked_ops(GOOD_DOC, tree / "pkg" / "ops", tree) == []
    assert control_characters(GOOD_DOC) == []
    assert sections_without_code(GOOD_DOC) == []


def test_checker_reports_links_that_do_not_resolve(tree):
    doc = GOOD_DOC.replace("Layer.backward", "Layer.forward").replace(
        "thing.py::thing_forward", "thing.py::thing_forwards"
    )
    doc += "\nCode: `pkg/missing.py::f`, `pkg/mod.py::helper`, `pkg/sub.py::Outer.forward`\n"
    problems = unresolved_links(doc, tree)
    assert len(problems) == 5, problems
    joined = "\n".join(problems)
    assert "pkg/ops/thing.py::thing_forwards: pkg/ops/thing.py defines no thing_forwards" in joined
    assert "pkg/mod.py::Layer.forward" in joined
    assert "pkg/missing.py::f: no file pkg/missing.py" in joined
    assert "pkg/mod.py::helper" in joined  # defined in another file, not in this one
    assert "pkg/sub.py::Outer.forward" in joined  # neither Outer nor its base defines it


def test_checker_reports_an_unlinked_op(tree):
    doc = GOOD_DOC.replace(", `pkg/ops/thing.py::thing_backward`,", ",")
    assert unlinked_ops(doc, tree / "pkg" / "ops", tree) == ["pkg/ops/thing.py::thing_backward"]
    # private ops and helpers are never required
    ops = op_functions(tree / "pkg" / "ops", tree)
    assert "pkg/ops/thing.py::_hidden_forward" not in ops
    assert "pkg/ops/thing.py::helper" not in ops


def test_checker_reports_control_characters():
    doc = GOOD_DOC.replace("The derivation.", "$K^\top$ and $\boxed{x}$\r")
    problems = control_characters(doc)
    assert [p.split(": U+")[0] for p in problems] == [
        "line 12, column 4",
        "line 12, column 14",
        "line 12, column 23",
    ], problems
    assert "U+0009 (a lost backslash: \\t)" in problems[0]
    assert "U+0008 (a lost backslash: \\b)" in problems[1]
    assert "U+000D (a lost backslash: \\r)" in problems[2]


def test_checker_reports_a_section_without_code():
    doc = GOOD_DOC + "\n## Orphan\n\nNo link here, and `pkg/mod.py` alone is no link.\n"
    doc += "\n```text\n## not a heading inside a fence\n```\n"
    assert sections_without_code(doc) == ["line 18: ## Orphan"]
