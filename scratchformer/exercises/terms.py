"""Names that need no catalogue: each exercise's backward written as the derivation's
named terms, and a wrong gradient read as the right one with one term changed.

The engine's backward passes stay as they are. Beside them, each exercise has its
backward once more, written term by term with the derivation's names ("the row-sum
term", "the variance term", "the second term of GELU's derivative"), each behind a knob
(``Knob``): ``TermSet.code(knob)`` is that backward, as the exercise's functions, with
one term's coefficient changed or one of its inputs replaced. With no knob it equals the
engine's to rounding (tests/exercises/test_terms.py: the terms sum to the engine's pass
within 1e-12 in float64).

A backward is linear in each of its terms, so with ``E`` the part one term adds to a
gradient (the right gradient minus the gradient without it), a learner's gradient that
is the right one with that term scaled by ``a`` is ``right + (a - 1) E`` on every input.
``diagnose`` solves for ``a`` per input and names it: 0 (the term dropped), 2 (counted
twice), -1 (its sign flipped) or a size of that input (V, S, T, B, d_k, n_tokens,
1/(1-p), H, D, the rows; their roots and inverses: ``sizes.name``). A replaced input
(x for u, dout for dxhat, A' for P) is a ``Swap``: the learner's gradient equals the
reference's computed with that replacement.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from scratchformer.engine import backend
from scratchformer.exercises.spec import LearnerError, Mistake, NotWritten

#: how closely a learner's gradient must equal the right one with one term changed
FIT_TOL = 1e-7


@dataclass(frozen=True)
class Term:
    """A term of a gradient: ``says`` names it in the derivation's words."""

    key: str
    says: str  # "the variance term, xhat * mean(dxhat * xhat)"
    where: str = ""  # "step 3" of the derivation's section, for the hint
    # coefficients this term is often off by, named in words: {value(sizes): words}
    known: tuple = ()  # ((callable sizes -> value, "1/(D-1) for 1/D"), ...)


@dataclass(frozen=True)
class Swap:
    """One input of the reference replaced: ``says`` what was used for what."""

    key: str
    says: str  # "dout used for dxhat = dout * gamma (gamma left out)"
    where: str = ""


class Knob:
    """Which term is changed: ``k("variance")`` is its coefficient (1 unless it is the
    one), ``k.swap("dout-for-dxhat")`` whether that replacement is made."""

    def __init__(self, key: str | None = None, value: float = 1.0):
        self.key, self.value = key, value

    def __call__(self, key: str) -> float:
        return self.value if key == self.key else 1.0

    def swap(self, key: str) -> bool:
        return key == self.key


NONE = Knob()


@dataclass
class TermSet:
    """An exercise's backward as named terms."""

    code: Callable  # code(knob) -> {function name: callable}
    terms: tuple  # (Term, ...), tried in order
    swaps: tuple = ()  # (Swap, ...)
    # {gradient: (term keys)}: the terms that make up that gradient (they sum to it)
    sums: dict = field(default_factory=dict)
    section: str = ""


# -- sizes -------------------------------------------------------------------------------
_POWERS = ((1, "{n}"), (-1, "1/{n}"), (0.5, "sqrt({n})"), (-0.5, "1/sqrt({n})"),
           (2, "{n}^2"), (-2, "1/{n}^2"))


def size_names(c: float, sizes: dict) -> list[str]:
    """What a factor ``c`` is among an input's ``sizes`` ({name: value}): "1/B (the
    batch size)", "sqrt(d_k)", ... (every match, in the order of ``sizes``)."""
    found = []
    for name, value in sizes.items():
        if not value or value <= 0 or value == 1.0:
            continue
        short, _, gloss = name.partition(" (")
        base = short if short.replace("_", "").isalnum() else f"({short})"
        for p, form in _POWERS:
            if math.isclose(c, value**p, rel_tol=1e-6):
                text = form.format(n=short if form == "{n}" or "sqrt" in form else base)
                found.append(text + (f" ({gloss}" if gloss else ""))
                break
    return found


# -- fitting -----------------------------------------------------------------------------
def _np(a):
    np = backend.np
    return np.asarray(backend.asnumpy(a), dtype=np.float64)


def _size(*arrays) -> float:
    return max([float(abs(a).max(initial=0.0)) for a in arrays] + [1e-300])


def _coefficients(diffs: list, parts: list, scales: list) -> list | None:
    """Per input, b with diff = b part (None where part is zero and so is diff); None
    when one input has no such b."""
    found = []
    for d, e, s in zip(diffs, parts, scales):
        if d.shape != e.shape:
            return None
        if float(abs(e).max(initial=0.0)) <= 1e-12 * s:
            if float(abs(d).max(initial=0.0)) > FIT_TOL * s:
                return None
            found.append(None)
            continue
        b = float((d * e).sum() / (e * e).sum())
        if float(abs(d - b * e).max(initial=0.0)) > FIT_TOL * s:
            return None
        found.append(b)
    return found


def _how(coefs: list, sizes: list, term: Term, labels: list, named_only: bool) -> str | None:
    """The words for a term scaled by ``coefs`` (per input, None where it does not
    appear): dropped, twice, the wrong sign, a size, or (``named_only`` False) a
    constant; None if the coefficients follow no one rule."""
    on = [(a, s, lab) for a, s, lab in zip(coefs, sizes, labels) if a is not None]
    if not on:
        return None
    changed = [(a, s, lab) for a, s, lab in on if not math.isclose(a, 1.0, rel_tol=1e-6)]
    if not changed:
        return None
    where = ""
    if len(changed) < len(on):  # right on some inputs: say on which it is wrong
        where = f" (on {len(changed)} of {len(on)} inputs: {'; '.join(x[2] for x in changed[:2])})"
    for value, words in ((0.0, "is missing"), (2.0, "is counted twice"),
                         (-1.0, "has the wrong sign")):
        if all(math.isclose(a, value, rel_tol=1e-6, abs_tol=1e-9) for a, _, _ in changed):
            return words + where
    for fn, words in term.known:
        if all(math.isclose(a, fn(s), rel_tol=1e-6) for a, s, _ in changed):
            return f"is multiplied by {words}{where}"
    names = None
    for a, s, _ in changed:
        here = size_names(a, {**s, "2": 2.0})
        names = here if names is None else [n for n in names if n in here]
    if names:
        return f"is multiplied by {' or '.join(names[:2])}{where}"
    if not named_only and all(math.isclose(a, changed[0][0], rel_tol=1e-6)
                              for a, _, _ in changed):
        return f"is multiplied by {changed[0][0]:.4g}{where}"
    return None


# -- the diagnosis -----------------------------------------------------------------------
def _outputs(ex, code: dict):
    try:
        return ex.outputs(ex.with_code(code))
    except (LearnerError, NotWritten):
        return None


def diagnose(ex, ts: TermSet, mine: list, ref: list, wrong: list, facts: list) -> list:
    """``[(Mistake, [tensors])]``: for each wrong gradient, the one term whose change
    (dropped, twice, the wrong sign, a size) or the one swapped input explains it on
    every input."""
    labels = ex.case_labels()
    sizes = [f.get("sizes", {}) for f in facts] or [{} for _ in ref]
    link = ex.link().split(" (")[0]
    cache: dict = {}

    def without(key):  # the gradients with the term ``key`` dropped
        if key not in cache:
            cache[key] = _outputs(ex, ts.code(Knob(key, 0.0)))
        return cache[key]

    def swapped(key):
        if ("swap", key) not in cache:
            cache[("swap", key)] = _outputs(ex, ts.code(Knob(key)))
        return cache[("swap", key)]

    found: dict = {}  # (says, hint) -> [tensors], in order
    for t in wrong:
        m = [_np(o[t]) if t in o else None for o in mine]
        r = [_np(o[t]) if t in o else None for o in ref]
        keep = [i for i, (a, b) in enumerate(zip(m, r)) if a is not None and b is not None]
        if not keep or any(m[i].shape != r[i].shape for i in keep):
            continue
        diffs = [m[i] - r[i] for i in keep]
        scales = [_size(m[i], r[i]) for i in keep]
        # a swapped input first (the most particular), then a term changed in a way
        # that has a name, then a term multiplied by a number that has none
        args = (ts, t, keep, r, diffs, scales, sizes, labels, without, link)
        said = (_by_swap(ts, t, keep, r, diffs, scales, swapped, link)
                or _by_term(*args, named_only=True) or _by_term(*args, named_only=False))
        if said is not None:
            found.setdefault(said, []).append(t)
    return [(Mistake(f"terms:{i}", says, hint, {}), tensors)
            for i, ((says, hint), tensors) in enumerate(found.items())]


def _by_term(ts, t, keep, r, diffs, scales, sizes, labels, without, link, named_only):
    for term in ts.terms:
        outs = without(term.key)
        if outs is None:
            continue
        parts = []
        for i in keep:
            w = outs[i].get(t) if i < len(outs) else None
            if w is None:
                break
            parts.append(r[i] - _np(w))
        if len(parts) != len(keep):
            continue
        bs = _coefficients(diffs, parts, scales)
        if bs is None or all(b is None for b in bs):
            continue
        coefs = [None if b is None else 1.0 + b for b in bs]
        how = _how(coefs, [sizes[i] if i < len(sizes) else {} for i in keep], term,
                   [labels[i] for i in keep], named_only)
        if how is None:
            continue
        says = f"{term.says} {how}"
        return says, f"{link}{', ' + term.where if term.where else ''}"
    return None


def _by_swap(ts, t, keep, r, diffs, scales, swapped, link):
    for sw in ts.swaps:
        outs = swapped(sw.key)
        if outs is None:
            continue
        ok, moved = True, False
        for j, i in enumerate(keep):
            w = outs[i].get(t) if i < len(outs) else None
            if w is None or _np(w).shape != r[i].shape:
                ok = False
                break
            d = _np(w) - r[i]
            if float(abs(diffs[j] - d).max(initial=0.0)) > FIT_TOL * scales[j]:
                ok = False
                break
            moved = moved or float(abs(d).max(initial=0.0)) > FIT_TOL * scales[j]
        if ok and moved:
            return sw.says, f"{link}{', ' + sw.where if sw.where else ''}"
    return None


__all__ = ["FIT_TOL", "NONE", "Knob", "Swap", "Term", "TermSet", "diagnose", "size_names"]
