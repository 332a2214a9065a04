"""What every exercise has: the code the learner writes, the mistakes it recognises, and
how the learner's code is run on the exercise's inputs, its errors told in one line.

An exercise asks for one or more functions (``Exercise.functions``) and knows:

- the file the learner starts from (``file_text``): the given forward as the engine has
  it, the signature and docstring of what to write, a body to fill in;
- the engine's own code for the same names (``engine``) and the text of a file that
  passes with it (``solution_text``);
- its inputs, chosen where backward passes usually go wrong, and ``outputs(code)``: what
  ``code`` (a dict of the learner's functions, the engine's or a mistake's) returns on
  each of them, as ``{tensor name: array}`` per input;
- ``numeric(code)``: the grader's truth, float64 central differences of the forward
  (``scratchformer.engine.gradcheck``), or for Adam the engine's update;
- its catalogue of classic mistakes: each a wrong version of the same functions. A
  learner's outputs equal to a mistake's on every input *are* that mistake;
- ``plug(code)``: the learner's code put in place in the engine while a model trains.
"""

from __future__ import annotations

import builtins
import contextlib
import inspect
import os
import textwrap
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from scratchformer.engine import backend
from scratchformer.engine.errors import ScratchformerError
from scratchformer.engine.gradcheck import DEFAULT_H, DEFAULT_TOL
from scratchformer.engine.parity import relative_error

#: the largest relative error (``max|a - b| / max|b|``) at which a learner's result is
#: taken to be a catalogued mistake's: rounding apart, the same numbers
MATCH_TOL = 1e-9
#: the grader's tolerance and step: those of ``scratchformer gradcheck``
TOL, H = DEFAULT_TOL, DEFAULT_H
#: where the derivations are, in a clone and on the documentation site
DERIVATIONS = "docs/derivations.md"
SITE_PAGE = "derivations.html"


class LearnerError(ScratchformerError):
    """The learner's code could not be graded: a syntax error, an exception, a missing
    function, a result of the wrong kind. The message is one line, about their code."""


class NotWritten(Exception):
    """The learner's function still raises NotImplementedError."""


class Shortcut(LearnerError):
    """The engine's own backward, or finite differences of the learner's own, reached
    while the learner's code ran: the check proves nothing (a failing check)."""


def same(a, b) -> bool:
    """Equal shapes, NaN and inf at the same entries, the rest within ``MATCH_TOL``."""
    np = backend.np
    a = np.asarray(backend.asnumpy(a), dtype=np.float64)
    b = np.asarray(backend.asnumpy(b), dtype=np.float64)
    if a.shape != b.shape:
        return False
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not np.array_equal(fa, fb) or not np.array_equal(a[~fa], b[~fb], equal_nan=True):
        return False
    return bool(fa.sum() == 0 or relative_error(a[fa], b[fb]) <= MATCH_TOL)


def file_of(fn) -> str | None:
    """The learner's file a function of theirs was compiled from (a function that calls
    it in the learner's process says which: ``learner_file``)."""
    return getattr(fn, "learner_file", None) or getattr(
        getattr(fn, "__code__", None), "co_filename", None
    )


@dataclass(frozen=True)
class Mistake:
    """A classic wrong gradient: ``code`` replaces some of the exercise's functions."""

    name: str  # a short id, unique in its exercise: "no-variance"
    says: str  # the diagnosis: "layer norm without its variance term"
    hint: str  # one line on what to look at, never the answer; ends with the section
    code: dict  # {function name: the wrong callable}


class Exercise:
    """The parts every kind of exercise has (see the module docstring)."""

    name: str
    title: str  # "layer norm"
    summary: str  # one line for ``exercise list``
    kind: str  # "op", "layer" or "optimizer"
    section: str  # the anchor of its section in docs/derivations.md
    functions: tuple  # the names the learner writes, in the file's order
    hints: tuple = ()
    mistakes: tuple = ()
    gradients: tuple = ()  # the tensors ``outputs`` names, in order

    # -- what each kind defines -----------------------------------------------------------
    def engine(self) -> dict:
        """``{function name: the engine's callable}``."""
        raise NotImplementedError

    def file_text(self) -> str:
        raise NotImplementedError

    def solution_text(self) -> str:
        raise NotImplementedError

    def case_labels(self) -> list[str]:
        raise NotImplementedError

    def outputs(self, code: dict, dtype: str = "float64") -> list[dict]:
        raise NotImplementedError

    def numeric(self, code: dict) -> list:
        """``[(case label, GradReport)]``: the learner's gradients against the truth."""
        raise NotImplementedError

    def facts(self) -> list[dict]:
        """Per input, what the generic diagnoses may name: ``{"scales": {name: value},
        "ids": int array or None}`` (generic.py); none by default."""
        return []

    def plug(self, code: dict):
        """A context manager: ``code`` in place of the engine's while it is open."""
        raise NotImplementedError

    def used_by(self, model) -> str:
        """Where a model of config ``model`` (a TransformerConfig) runs this exercise's
        code, or "" when it does not."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------
    def link(self) -> str:
        return f"{DERIVATIONS}#{self.section} (on the docs site: {SITE_PAGE}#{self.section})"

    def with_code(self, code: dict) -> dict:
        """The engine's functions with ``code`` put over them (a mistake's, a learner's)."""
        return {**self.engine(), **code}

    def mistake(self, name: str) -> Mistake:
        for m in self.mistakes:
            if m.name == name:
                return m
        raise KeyError(name)


# -- inputs drawn afresh each run -------------------------------------------------------
#: the label of every drawn input starts with it
DRAWN = "drawn"
_DRAW: dict = {"seed": None}


def new_seed() -> int:
    """A seed for the drawn shapes of one run of ``check`` (printed, so it replays)."""
    return int.from_bytes(os.urandom(4), "little") % 1_000_000


@contextlib.contextmanager
def drawing(seed: int | None):
    """Every exercise's inputs include shapes drawn from ``seed`` while the context is
    open (None: the designed inputs only, as the learner's file lists them)."""
    saved = _DRAW["seed"]
    _DRAW["seed"] = seed
    try:
        yield
    finally:
        _DRAW["seed"] = saved


def draw_seed() -> int | None:
    return _DRAW["seed"]


@contextlib.contextmanager
def drawn_case(label: str):
    """An error of the learner's code on a drawn input says so: the designed inputs
    passed before it, so a size written into the code is the likely cause."""
    try:
        yield
    except LearnerError as e:
        if not label.startswith(DRAWN) or "drawn input" in str(e):
            raise
        raise type(e)(
            f"{e} (on the input {label[len(DRAWN) + 2 :]}, drawn with seed {draw_seed()}: is "
            "a size of the other inputs written into your code?)"
        ) from None


# -- running a learner's code ------------------------------------------------------------
def where_in(path: str, tb) -> tuple[int, str] | None:
    """``(line, function)`` of the last frame of ``tb`` in the file ``path``."""
    found = None
    for frame in traceback.extract_tb(tb):
        if frame.filename == path:
            found = (frame.lineno, frame.name)
    return found


@contextlib.contextmanager
def learner_code(path: str | None, doing: str):
    """Run the learner's code (from the file ``path``): NotImplementedError becomes
    ``NotWritten``, any other exception a one-line ``LearnerError`` naming the line of
    their file it came from. ``doing`` says what ran ("layernorm_backward")."""
    try:
        with backend.np.errstate(all="ignore"):  # NaN and inf are reported, not warned
            yield
    except (LearnerError, NotWritten):
        raise
    except NotImplementedError as e:
        frames = traceback.extract_tb(e.__traceback__)
        if not path or (frames and frames[-1].filename == path):  # their stub's raise
            raise NotWritten(str(e) or doing) from None
        last = frames[-1] if frames else None  # raised elsewhere: not their file's stub
        place = f" in {shown(last.filename)}, line {last.lineno}" if last else ""
        at = where_in(path, e.__traceback__)
        mine = f"{shown(path)}, line {at[0]}: " if at else ""
        raise LearnerError(
            f"{mine}NotImplementedError{place}: {str(e) or 'raised'} (not your function's "
            "stub: a file it calls)"
        ) from None
    except Exception as e:  # the learner's code may raise anything
        at = where_in(path, e.__traceback__) if path else None
        what = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
        if isinstance(e, ImportError) and e.name == "scratchformer" and "'kernels'" in str(e):
            what += (" (a file started with an earlier scratchformer: the ops are now called "
                     "through their tables, e.g. 'from scratchformer.engine.ops.linear import "
                     "linear' and 'linear.backward(...)' for 'kernels.linear.backward(...)')")
        if at is None:
            raise LearnerError(f"{doing} failed with {what}") from None
        line, func = at
        raise LearnerError(f"{shown(path)}, line {line}, in {func}: {what}") from None


#: the folder paths are shown from: the learner's current folder (the process that runs
#: their code works in a scratch folder, and shows paths from theirs all the same)
_SHOWN_FROM: dict = {"folder": None}


def shown_from(folder: str) -> None:
    _SHOWN_FROM["folder"] = folder


def shown(path: str) -> str:
    """A file's path as the learner would write it: relative to the current folder when
    it is below it."""
    rel = os.path.relpath(path, _SHOWN_FROM["folder"] or os.getcwd())
    return path if rel.startswith("..") else rel


def source(fn: Callable, name: str | None = None) -> str:
    """The source of ``fn``, dedented, renamed ``name`` when given (a method becomes a
    function of ``self``)."""
    text = textwrap.dedent(inspect.getsource(fn))
    if name is not None:
        text = text.replace(f"def {fn.__name__}(", f"def {name}(", 1)
    return text.rstrip() + "\n"


def _global_names(code) -> set:
    """The names a code object (and the functions, lambdas and comprehensions inside it)
    may read from its module: attribute names too, which are harmless extras."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _global_names(const)
    return names


def needs(header: str, fns: list, defined=()) -> tuple[list[str], list]:
    """What a file made of ``header`` (its imports) and the sources of ``fns`` lacks for
    every global name of those functions to resolve as in the engine: ``(import lines,
    functions whose source it must hold)``. A function of the package is copied (its own
    needs followed); anything else (a module, a class, a constant) is imported from
    where the function that reads it finds it. So a helper the engine's code starts to
    call is carried into the learner's file without a list to keep up to date.
    ``defined``: names the file defines besides ``fns``."""
    have: dict = {}
    exec(compile(header, "<header>", "exec"), have)  # imports only
    defined = {f.__name__ for f in fns} | set(defined)
    imports, copied, queue = [], [], list(fns)
    while queue:
        fn = queue.pop(0)
        module = inspect.getmodule(fn)
        for name in sorted(_global_names(fn.__code__)):
            if name in have or name in defined or name in vars(builtins):
                continue
            if not hasattr(module, name):
                continue  # an attribute's name, not a global
            obj = getattr(module, name)
            defined.add(name)
            if inspect.isfunction(obj) and obj.__module__.startswith("scratchformer."):
                copied.append(obj)
                queue.append(obj)
            elif inspect.ismodule(obj):
                parent, _, leaf = obj.__name__.rpartition(".")
                line = f"from {parent} import {leaf}" if leaf == name else None
                imports.append(line or f"import {obj.__name__} as {name}")
            else:
                imports.append(f"from {module.__name__} import {name}")
    return imports, copied


def stub(signature: str, docstring: str, name: str) -> str:
    """A function to fill in: ``def signature:``, its docstring, a body that raises."""
    doc = textwrap.indent(textwrap.dedent(docstring).strip(), "    ")
    return (
        f"def {signature}:\n"
        f'    """{doc.lstrip()}\n    """\n'
        f'    raise NotImplementedError("{name}: not written yet")\n'
    )


def always(where: str) -> Callable:
    """An exercise's ``uses`` for code that runs in every model: ``where`` it runs."""
    return lambda model: where


def rule(title: str) -> str:
    """A section line of a learner's file, 92 characters wide."""
    return f"# -- {title} ".ljust(92, "-")


__all__ = [
    "always",
    "DERIVATIONS",
    "DRAWN",
    "draw_seed",
    "drawing",
    "drawn_case",
    "new_seed",
    "H",
    "MATCH_TOL",
    "TOL",
    "Exercise",
    "LearnerError",
    "Mistake",
    "NotWritten",
    "Shortcut",
    "file_of",
    "learner_code",
    "rule",
    "same",
    "source",
    "stub",
    "where_in",
]
