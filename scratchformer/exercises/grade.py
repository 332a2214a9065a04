"""Grading a learner's code: run it, recognise a catalogued mistake, check it against
float64 central differences, and say what is wrong in the learner's words.

    g = grade(exercise, {"layernorm_backward": fn}, path)
    g.status          "passing", "failing", "not written" or "broken"
    print("\\n".join(report(g)))

The order of the steps, on the exercise's designed inputs and (with a ``seed``) two
more of shapes drawn from it (draw.py, draw_layers.py):

0. read the learner's file for shortcuts: the engine's own code, autograd, finite
   differences of its own (shortcuts.py): ``failing``, what was found and where;
1. run the learner's code on every input of the exercise (an exception, a missing
   function, a result of the wrong kind: ``broken``, one line), on fresh copies of the
   inputs, which must be unchanged afterwards (guard.py: ``failing``, the array named);
2. compare what it returned with what each catalogued mistake returns on the same
   inputs: equal (to ``MATCH_TOL``) on every input, shapes included, is that mistake;
3. shapes, dtypes and NaNs, one line each; and on float32 inputs, whose results must
   be float32 (and, once the pass is right in float64, finite and within float32's
   tolerance of the truth: precision.py, after step 5);
4. the finite-difference check (``Exercise.numeric``): per gradient the largest
   relative error over the inputs and, for a wrong one, its worst entries; a gradient
   that is wrong and equals one mistake's version of it names that mistake, and before
   the catalogue, what the numbers say on their own (generic.py: a sign, a factor, ...);
5. for layers: the gradients were added into ``self.grads``, not put in place of what
   was there (which the finite differences, from zero gradients, cannot see).
"""

from __future__ import annotations

import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from scratchformer.engine import backend
from scratchformer.exercises import generic, precision, shortcuts, term_sets
from scratchformer.exercises.guard import ChangedInput
from scratchformer.exercises.spec import (
    DRAWN,
    TOL,
    Exercise,
    LearnerError,
    Mistake,
    NotWritten,
    Shortcut,
    drawing,
    same,
)

PASSING, FAILING, NOT_WRITTEN, BROKEN = "passing", "failing", "not written", "broken"
#: the worst entries shown of a wrong gradient
SHOWN = 5


@dataclass
class Wrong:
    """The entries of one wrong gradient, on the input where it is worst."""

    tensor: str
    case: str
    shape: tuple
    count: int  # entries off by more than the tolerance
    checked: int
    worst: list  # [(entry index, numeric, yours)]


@dataclass
class Grade:
    exercise: Exercise
    path: Path | None = None
    status: str = PASSING
    message: str = ""  # one line: why it is broken, not written, or failing
    rows: list = field(default_factory=list)  # [(tensor, largest rel err, passed)]
    wrong: list = field(default_factory=list)  # [Wrong]
    diagnosis: list = field(default_factory=list)  # [(Mistake, tensors or None: all)]
    seconds: float = 0.0
    seed: int | None = None  # the drawn inputs' seed
    notes: list = field(default_factory=list)  # what the code did besides: files changed
    printed: list = field(default_factory=list)  # what the code printed, as shown

    @property
    def passed(self) -> bool:
        return self.status == PASSING

    def short(self) -> str:
        """A few words for ``exercise list``."""
        if self.status == PASSING:
            return PASSING
        if self.diagnosis:
            return f"failing: {self.diagnosis[0][0].says}"
        if self.message:
            return f"{self.status}: {self.message}"
        bad = [name for name, _, ok in self.rows if not ok]
        if not bad and self.notes:  # right numbers, but the code changed files as it ran
            return f"{self.status}: {self.notes[0]}"
        return f"{self.status}: {', '.join(bad)} wrong"


# -- comparing results -------------------------------------------------------------------
def _all_same(mine: list, other: list, keys=None) -> bool:
    return all(
        k in m and k in o and same(m[k], o[k])
        for m, o in zip(mine, other)
        for k in (keys if keys is not None else o)
        if k in o
    )


def diagnose(ex: Exercise, mine: list, ref: list, outputs: dict) -> list:
    """``[(mistake, None)]`` for the mistakes whose results equal the learner's on every
    input (``outputs``: each mistake's results, or None where its code raised)."""
    return [(m, None) for m in ex.mistakes if outputs[m.name] and _all_same(mine, outputs[m.name])]


def diagnose_parts(ex: Exercise, mine: list, ref: list, outputs: dict, wrong: list) -> list:
    """For gradients that are wrong, the mistakes that have exactly that wrong version
    of them: ``[(mistake, [tensors])]``. A mistake is named only when every gradient it
    gets wrong is wrong in the learner's results in the same way: an encoder layer
    that adds dx_kv past the norm has the norm's gradients of "the queries only", and
    another dx, so it is not that mistake."""
    found = []
    for m in ex.mistakes:
        theirs = outputs[m.name]
        if not theirs:
            continue
        every = dict.fromkeys(t for r in ref for t in r)
        marks = [t for t in every if not _all_same(theirs, ref, [t])]  # what it gets wrong
        tensors = [t for t in wrong if t in marks and _all_same(mine, theirs, [t])]
        if tensors and all(_all_same(mine, theirs, [t]) for t in marks):
            found.append((m, tensors))
    return found


def _mistake_outputs(ex: Exercise) -> dict:
    found = {}
    for m in ex.mistakes:
        try:
            found[m.name] = ex.outputs(ex.with_code(m.code))
        except (LearnerError, NotWritten):  # a mistake that raises on these inputs
            found[m.name] = None
    return found


def _of(tensor: str) -> str:
    """What a gradient is the gradient of: ``dK`` -> ``K``; a parameter is itself."""
    return tensor[1:] if tensor.startswith("d") and "." not in tensor else tensor


def structure(ex: Exercise, mine: list, ref: list) -> str:
    """The first shape, dtype or NaN problem of the learner's results, or ""."""
    labels = ex.case_labels()
    for label, m, r in zip(labels, mine, ref):
        for k, want in r.items():
            got = m[k]
            if tuple(got.shape) != tuple(want.shape):
                said = (
                    f"{k} has shape {tuple(got.shape)}; expected {tuple(want.shape)}, the shape "
                    f"of {_of(k)}"
                )
                for k2, want2 in r.items():  # two results each of the other's shape
                    if (k2 != k and k2 in m and tuple(want2.shape) == tuple(got.shape)
                            and tuple(m[k2].shape) == tuple(want.shape)):
                        return (f"{said}: {k} and {k2} swapped (each has the other's shape; "
                                "return them in the docstring's order)")
                return said
            if got.dtype != want.dtype:
                return f"{k} has dtype {got.dtype}; expected {want.dtype}, the dtype of {_of(k)}"
            if not bool(backend.xp.isfinite(got).all()):
                return f"{k} holds NaN or inf (input: {label})"
    return ""




# -- the finite-difference check ---------------------------------------------------------
def _rows_and_wrong(reports: list) -> tuple[list, list]:
    """Per gradient: the largest relative error over the inputs and whether every input
    passed; the entries of each wrong one, on the input where it is worst."""
    worst: dict = {}  # name -> [largest error, passed everywhere, its row, its input]
    for label, report in reports:
        for row in report.rows:
            prev = worst.setdefault(row.name, [row.max_rel_error, True, row, label])
            prev[1] = prev[1] and row.passed
            if row.max_rel_error > prev[0]:
                prev[0], prev[2], prev[3] = row.max_rel_error, row, label
    rows = [(name, err, ok) for name, (err, ok, _, _) in worst.items()]
    wrong = [
        _entries(name, label, row)
        for name, (_, ok, row, label) in worst.items()
        if not ok and row.numeric is not None
    ]
    return rows, wrong


def _entries(name: str, label: str, row) -> Wrong:
    np = backend.np
    a, n = np.asarray(row.analytic, float), np.asarray(row.numeric, float)
    diff = np.abs(a - n)
    scale = max(1e-8, float((np.abs(a) + np.abs(n)).max()))
    bad = np.flatnonzero(diff > TOL * scale)
    order = bad[np.argsort(-diff[bad], kind="stable")][:SHOWN]
    worst = [
        (tuple(int(i) for i in np.unravel_index(row.indices[j], row.shape)), n[j], a[j])
        for j in order
    ]
    return Wrong(name, label, tuple(row.shape), int(bad.size), int(a.size), worst)


# -- grading -----------------------------------------------------------------------------
def grade(
    ex: Exercise, code: dict, path: Path | None = None, numeric: bool = True, seed=None,
    text: str | None = None,
) -> Grade:
    """Grade ``code`` (``{function name: callable}``) for the exercise ``ex``, on its
    designed inputs and on those drawn from ``seed`` (None: the designed ones only).
    ``text``: the file's text as it was loaded (read from ``path`` otherwise)."""
    t0 = time.perf_counter()
    g = Grade(ex, path, seed=seed)
    try:
        with drawing(seed):
            _grade(g, ex, code, numeric, text)
    except (ChangedInput, Shortcut) as e:
        g.status, g.message = FAILING, str(e)
    except NotWritten:
        names = " and ".join(ex.functions)
        verb = "is" if len(ex.functions) == 1 else "are"
        g.status = NOT_WRITTEN
        g.message = f"{names} {verb} not written yet (raises NotImplementedError)"
    except LearnerError as e:
        g.status, g.message = BROKEN, str(e)
    g.seconds = time.perf_counter() - t0
    return g


def _grade(g: Grade, ex: Exercise, code: dict, numeric: bool, text=None) -> None:
    missing = [f for f in ex.functions if not callable(code.get(f))]
    if missing:
        where = g.path.name if g.path else "the code"
        raise LearnerError(f"{where} defines no function {missing[0]}")
    found = _shortcut(ex, g.path, text)
    if found:
        g.status, g.message = FAILING, found
        return
    mine = ex.outputs(code)
    ref = ex.outputs(ex.engine())
    outputs = _mistake_outputs(ex)
    g.diagnosis = diagnose(ex, mine, ref, outputs)
    problem = structure(ex, mine, ref)
    if problem or g.diagnosis:
        g.status, g.message = FAILING, problem
        if problem:
            if ex.kind == "optimizer" and not g.diagnosis and "NaN" in problem:
                # Adam's steps compare NaN with NaN: which change of the update made it
                g.diagnosis = term_sets.with_terms(ex, mine, ref, list(ex.gradients), [], [])
            return
    problem, mine32 = precision.dtype_problem(ex, code, g.path, text)  # float32's dtype
    if problem:
        g.status, g.message = FAILING, problem
        return
    if numeric:
        g.rows, g.wrong = _rows_and_wrong(ex.numeric(code))
        if not all(ok for _, _, ok in g.rows):
            g.status = FAILING
            bad = [name for name, _, ok in g.rows if not ok]
            whole = bool(g.diagnosis)  # a catalogued mistake, equal on every input
            if not whole:
                g.diagnosis = diagnose_parts(ex, mine, ref, outputs, bad)
            # what the numbers themselves say (a sign, a factor, ...) comes first, then
            # (no mistake of the catalogue being the whole of it) the term that is wrong
            facts = ex.facts()
            found = generic.diagnose(ex, mine, ref, bad, facts)
            if not whole:  # the gradients no catalogued mistake's part names
                parts = {t for _, tensors in g.diagnosis for t in tensors or ()}
                rest = [t for t in bad if t not in parts]
                found = term_sets.with_terms(ex, mine, ref, rest, facts, found)
            g.diagnosis = found + g.diagnosis
            return
    if ex.kind == "layer" and not _all_same(mine, ref):
        lost = [k for k in ref[0] if not _all_same(mine, ref, [k])]
        g.status = FAILING
        g.message = (
            f"the gradients are right but {', '.join(lost[:4]) or 'some'} were not added "
            "into self.grads (+=): what was there before the call was lost"
        )
    if numeric and g.status != FAILING:  # right in float64: float32's values, NaN
        problem = precision.value_problem(ex, mine32, ref)
        if problem:
            g.status, g.message = FAILING, problem


def _shortcut(ex: Exercise, path, text=None) -> str:
    """A shortcut in the learner's file (the engine's code, autograd, finite
    differences: shortcuts.py), or ""."""
    if path is None or (text is None and not Path(path).is_file()):
        return ""
    try:
        text = Path(path).read_text(encoding="utf-8") if text is None else text
    except (OSError, UnicodeDecodeError):
        return ""  # loading it says so
    return shortcuts.find(ex, text, str(path))


def report(g: Grade) -> list[str]:
    """The lines ``exercise check`` prints for one grade."""
    ex = g.exercise
    where = f" ({g.path})" if g.path else ""
    lines = [f"{ex.name}: {ex.title}{where}"]
    if g.status in (BROKEN, NOT_WRITTEN):
        return lines + [*g.printed, *(x for n in g.notes for x in _wrap(n)),
                        f"  {g.status}: {g.message}"]
    if g.rows:
        with drawing(g.seed):
            labels = ex.case_labels()
        drawn = sum(label.startswith(DRAWN) for label in labels)
        designed = len(labels) - drawn
        inputs = f"{designed} input{'s' if designed != 1 else ''}" + (
            f" and {drawn} of drawn shapes (--seed {g.seed})" if drawn else ""
        )
        lines.append(
            f"  checked on {inputs} against "
            + ("the engine's Adam" if ex.kind == "optimizer" else "float64 central differences")
            + f" (tolerance {TOL:.0e}):"
        )
        w = max(len("gradient"), *(len(name) for name, _, _ in g.rows))
        lines.append(f"    {'gradient':<{w}}  {'largest rel err':>15}  verdict")
        for name, err, ok in g.rows:
            lines.append(f"    {name:<{w}}  {err:>15.1e}  {'ok' if ok else 'WRONG'}")
    for wr in g.wrong:
        lines.append(
            f"  {wr.tensor} is wrong at {wr.count} of {wr.checked} entries; the largest "
            f"differences (input: {wr.case}):"
        )
        truth = "engine" if ex.kind == "optimizer" else "numeric"  # Adam's truth: the engine
        lines.append(f"    {'entry':<16} {truth:>12} {'yours':>12} {'|yours - n|':>12}")
        for idx, n, a in wr.worst:
            lines.append(f"    {str(idx):<16} {n:>12.5e} {a:>12.5e} {abs(a - n):>12.1e}")
    if g.message:
        lines += _wrap(g.message)
    for mistake, tensors in g.diagnosis:
        lines += _named(mistake, tensors)
    for note in g.notes:
        lines += _wrap(note)
    if g.status == FAILING and not g.diagnosis and not g.message and not g.notes:
        lines.append(f"  not a mistake we know: compare each step with {ex.link()}")
    lines += g.printed
    verdict = {PASSING: "PASSED", FAILING: "FAILED"}[g.status]
    lines.append(f"  {verdict} ({g.seconds:.2f} s)")
    return lines


def _named(mistake: Mistake, tensors) -> list[str]:
    if mistake.name.startswith("terms:"):  # the reference with one term changed
        return [*_wrap(f"found: your {', '.join(tensors)}: {mistake.says}"),
                *_wrap(f"look for: {mistake.hint}")]
    if mistake.name.startswith("generic:"):  # read off the numbers, not the catalogue
        return [*_wrap(f"found: {mistake.says}"), *_wrap(f"look for: {mistake.hint}")]
    part = f" (your {', '.join(tensors)})" if tensors else ""
    return [
        *_wrap(f"recognised{part}: {mistake.says}"),
        *_wrap(f"hint: {mistake.hint}"),
    ]


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(
        text, 92, initial_indent="  ", subsequent_indent="        ", break_on_hyphens=False
    )


__all__ = [
    "BROKEN",
    "FAILING",
    "NOT_WRITTEN",
    "PASSING",
    "Grade",
    "diagnose",
    "grade",
    "report",
    "same",
]
