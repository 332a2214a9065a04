"""float32: the model trains in it, so a learner's backward pass is run once more on the
exercise's inputs in float32 and must give float32 results, finite where float64's are,
and equal to the truth within float32's tolerance.

The truth is the engine's float64 result on the same inputs. On an input whose float32
version differs by construction (a dropout mask is drawn anew in each dtype, so float32
and float64 drop other entries), the engine's own float32 result on that input stands in
for it: the same mask, float32's rounding. Either way a right pass in float32 is within
rounding of it (the engine's own float32 results are within 1e-6 of float64's), and a
pass that is right only in float64 (a float32-only branch, a step in float16, a
constant that underflows to 0 in float32) is told apart.

When a float32 input gives float64 results, the likely cause is named: a NumPy scalar
(``np.sqrt(2 / np.pi)`` is a float64 scalar, and NumPy 2 keeps a NumPy scalar's dtype in
arithmetic with a float32 array, as it does an array's), found in the learner's file, or
else a new array made without the inputs' dtype.
"""

from __future__ import annotations

import ast
from pathlib import Path

from scratchformer.engine import backend
from scratchformer.engine.parity import relative_error
from scratchformer.exercises import shortcuts
from scratchformer.exercises.spec import LearnerError, NotWritten, shown

#: the largest relative difference (``max|a - b| / max|b|``) of a float32 result from
#: the truth taken for float32's rounding: about 1000 float32 epsilons (1.2e-7); the
#: engine's own float32 results are within 1e-6 of float64's on every exercise's inputs,
#: a wrong term is off by its own size
F32_TOL = 1e-4
#: the modules whose functions of constants make NumPy (or CuPy) scalars
_ARRAY_MODULES = ("numpy", "cupy", "scratchformer.engine.backend")


def dtype_problem(ex, code: dict, path=None, text: str | None = None) -> tuple[str, list]:
    """``(problem, results)``: the learner's ``code`` run on the float32 inputs, and
    the line that says a result is not float32 (its likely cause named), or ""."""
    mine = ex.outputs(code, "float32")
    for k, got in (kv for m in mine for kv in m.items()):
        if got.dtype != backend.np.float32:
            return _dtype_line(k, got.dtype, ex.functions, path, text), mine
    return "", mine


def value_problem(ex, mine: list, ref: list) -> str:
    """For a pass right in float64: the line that says its float32 results ``mine``
    (``dtype_problem``'s) hold NaN or inf, or are off the truth by more than float32's
    rounding (``ref``: the engine's float64 results on the same inputs), or ""."""
    labels = ex.case_labels()
    try:
        engine = ex.outputs(ex.engine(), "float32")
    except (LearnerError, NotWritten):  # the engine's code runs on every input
        return ""
    for label, m, want64, want32 in zip(labels, mine, ref, engine):
        truth = want64 if _comparable(want32, want64) else want32
        for k, want in truth.items():
            got = m.get(k)
            if got is None or tuple(got.shape) != tuple(want.shape):
                continue  # said by the float64 check of shapes
            finite = backend.xp.isfinite(got)
            if not bool(finite.all()) and bool(backend.xp.isfinite(want).all()):
                return (
                    f"on float32 inputs {k} holds NaN or inf (input: {label}), though right "
                    "on float64: a constant that underflows or overflows in float32 (1e-46 "
                    "is 0 there, 1e39 inf), or an exp too large for it"
                )
            err = relative_error(got, want)
            if err > F32_TOL:
                return (
                    f"on float32 inputs {k} is off by {err:.1e} (relative; float32's "
                    f"tolerance {F32_TOL:.0e}, input: {label}), though right on float64: "
                    "a step in another precision (float16, integers) or a branch taken on "
                    "float32 only"
                )
    return ""


def _comparable(want32: dict, want64: dict) -> bool:
    """The engine's float32 result is float64's to rounding: the input is the same in
    both dtypes (a dropout mask drawn in float32 drops other entries)."""
    return all(k in want32 and relative_error(want32[k], v) <= F32_TOL / 100
               for k, v in want64.items())


def _dtype_line(k: str, dtype, functions, path, text) -> str:
    scalars = float64_scalars(_text(path, text), functions)
    if scalars:
        line, expr = scalars[0]
        return (
            f"on float32 inputs {k} is {dtype}: {shown(str(path))}, line {line}: {expr} is a "
            "NumPy float64 scalar, and NumPy (2 and later) keeps a NumPy scalar's dtype in "
            "arithmetic with a float32 array: write the constant as a Python float "
            "(math.sqrt(2 / math.pi)), or make it in the inputs' dtype "
            "(xp.asarray(c, dtype=dout.dtype))"
        )
    return (
        f"on float32 inputs {k} is {dtype}: make new arrays in the inputs' dtype "
        "(e.g. xp.zeros(shape, dtype=dout.dtype))"
    )


def _text(path, text) -> str:
    if text is not None:
        return text
    try:
        return Path(path).read_text(encoding="utf-8") if path else ""
    except (OSError, UnicodeDecodeError):
        return ""


def float64_scalars(text: str, functions=()) -> list[tuple[int, str]]:
    """``[(line, expression)]``: the calls of NumPy's (CuPy's, ``xp``'s) functions on
    constants alone (``np.sqrt(2 / np.pi)``, ``np.float64(0.5)``, ``xp.asarray(0.5)``),
    each a float64 NumPy scalar or array, at the top level of the file or in the
    learner's ``functions`` (the given forward is the engine's, never one of them)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    modules = _array_names(tree)
    found = []
    for node in shortcuts._learners(tree, set(functions)):
        if not (isinstance(node, ast.Call) and _module_call(node, modules)):
            continue
        if shortcuts._attribute_chain(node.func)[-1] in ("float32", "float16"):
            continue  # a scalar of the narrower dtype, asked for
        args = [*node.args, *(k.value for k in node.keywords)]
        if all(_constant(a, modules) for a in args) and not any(
            k.arg == "dtype" for k in node.keywords
        ):
            found.append((node.lineno, ast.get_source_segment(text, node) or ast.unparse(node)))
    return sorted(found)


def _array_names(tree) -> set:
    """The names the file gives NumPy, CuPy and the backend's ``xp``/``np``."""
    names = {"np", "xp", "numpy", "cupy", "cp"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name for a in node.names if a.name in _ARRAY_MODULES}
        elif isinstance(node, ast.ImportFrom) and node.module in _ARRAY_MODULES:
            names |= {a.asname or a.name for a in node.names if a.name in ("xp", "np")}
    return names


def _module_call(node: ast.Call, modules: set) -> bool:
    chain = shortcuts._attribute_chain(node.func)
    return len(chain) >= 2 and chain[0] in modules


def _constant(node, modules: set) -> bool:
    """A number, ``np.pi``, ``math.e``, or arithmetic and NumPy calls of those."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.Attribute):
        chain = shortcuts._attribute_chain(node)
        return len(chain) == 2 and chain[1] in ("pi", "e") and chain[0] in {*modules, "math"}
    if isinstance(node, ast.UnaryOp):
        return _constant(node.operand, modules)
    if isinstance(node, ast.BinOp):
        return _constant(node.left, modules) and _constant(node.right, modules)
    if isinstance(node, ast.Call):
        chain = shortcuts._attribute_chain(node.func)
        return (chain[:1] == ["math"] or _module_call(node, modules)) and all(
            _constant(a, modules) for a in node.args)
    return False


def problem(ex, code: dict, ref: list, path=None, text: str | None = None) -> str:
    """The first float32 problem of a pass right in float64, in one line, or ""."""
    found, mine = dtype_problem(ex, code, path, text)
    return found or value_problem(ex, mine, ref)


__all__ = ["F32_TOL", "dtype_problem", "float64_scalars", "problem", "value_problem"]
