"""Diagnoses that need no catalogue: what the learner's gradients are, compared with the
right ones on the same inputs (the engine's, equal to the finite differences to rounding).

- a flipped sign: yours = -right on every entry;
- a constant factor: yours = c right on every entry, with c named when it is a scale of
  that input (1/sqrt(d_k), 1/(1-p), the number of targets, the rows, the batch, 2);
- swapped outputs: two gradients, each equal to the other's right value;
- all zeros: a gradient never computed, or never added;
- wrong only where the right gradient is zero (masked or padded entries);
- wrong only on the rows of ids used more than once (an embedding's repeated ids).

``facts`` (per input: ``{"scales": {name: value}, "ids": int array or None}``) comes from
the exercise (``Exercise.facts``); every check works without it too.
"""

from __future__ import annotations

import math

from scratchformer.engine import backend, dispatch
from scratchformer.exercises.spec import MATCH_TOL, Mistake
from scratchformer.exercises.terms import size_names

#: how close a factor must be to a known scale to be named after it
FACTOR_TOL = 1e-6


def _np(a):
    np = backend.np
    return np.asarray(backend.asnumpy(a), dtype=np.float64)


def _close(a, b, tol: float = FACTOR_TOL) -> bool:
    np = backend.np
    scale = max(float(np.abs(b).max(initial=0.0)), 1e-300)
    return a.shape == b.shape and float(np.abs(a - b).max(initial=0.0)) <= tol * scale


def _pairs(mine: list, ref: list, t: str) -> list:
    return [(_np(m[t]), _np(r[t])) for m, r in zip(mine, ref) if t in m and t in r]


def _nonzero(pairs: list) -> list:
    return [(a, b) for a, b in pairs if float(abs(b).max(initial=0.0)) > 0.0]


def _factor(pairs: list) -> list[float] | None:
    """Per input, c with yours = c right on every entry; None if there is none."""
    found = []
    for a, b in _nonzero(pairs):
        c = float((a * b).sum() / (b * b).sum())
        if not _close(a, c * b):
            return None
        found.append(c)
    return found or None


def _name_factor(c: float, scales: dict) -> str:
    """What a factor c is, among the input's ``scales`` (``{name: value}``)."""
    for name, value in scales.items():
        inverse = name[2:] if name.startswith("1/") else f"1/{name}"
        for power, text in ((1, name), (-1, inverse), (2, f"({name})^2"), (-2, f"({inverse})^2")):
            if value and value != 1.0 and math.isclose(c, value**power, rel_tol=1e-6):
                return text
    return ""


def shape_scales(shape) -> dict:
    """The counts a gradient of this shape is often wrongly divided or multiplied by."""
    found = {}
    if len(shape) >= 2:
        found["the batch size"] = float(shape[0])
        found["the number of rows"] = float(math.prod(shape[:-1]))
    return {k: v for k, v in found.items() if v > 1}


def shape_sizes(shape) -> dict:
    """The sizes of an array of this shape a gradient is often wrongly scaled by
    (``terms.size_names`` names their powers: 1/B, sqrt(D), ...)."""
    found = {}
    if len(shape) >= 2:
        found["B (the batch size)"] = float(shape[0])
        found["N (the rows)"] = float(math.prod(shape[:-1]))
    if len(shape) >= 1:
        found["D (the last axis)"] = float(shape[-1])
    return {k: v for k, v in found.items() if v > 1}


#: the sizes read off a cache's arrays: {field: [(axis, "name (gloss)")]}
_AXES = {
    "Q": [(-2, "T (the queries)"), (-1, "d_k"), (-3, "H (the heads)")],
    "K": [(-2, "S (the keys)")],
    "gamma": [(-1, "D (the last axis)")],
    "target": [(0, "B (the batch size)")],
}


def cache_facts(cache, path: str = "cache", found: dict | None = None, depth: int = 0) -> dict:
    """``{"scales": ..., "sizes": ..., "ids": ...}`` read off a cache's fields: a
    dropout's scale 1/(1-p), the logits' 1/sqrt(d_k), the number of targets, the ids
    looked up; and the sizes (V, T, S, H, d_k, D, 1-p, n_tokens) a term may be scaled
    by. A cache an op's table made (``dispatch.Cache``) is read through to its
    implementation's."""
    found = found if found is not None else {"scales": {}, "sizes": {}, "ids": None}
    sizes = found.setdefault("sizes", {})
    if isinstance(cache, dispatch.Cache):
        cache = cache.value
    if depth > 4 or not (isinstance(cache, tuple) and hasattr(cache, "_fields")):
        return found
    for field, value in zip(cache._fields, cache):
        where = f"{path}.{field}"
        if field == "scale" and isinstance(value, float) and value not in (0.0, 1.0):
            dropout = "dropout" in where or "Dropout" in type(cache).__name__
            name = "1/(1-p)" if dropout else "1/sqrt(d_k)"
            found["scales"][name] = value
            sizes.setdefault("1-p" if dropout else "d_k", 1.0 / value if dropout else value**-2)
        elif field == "n_tokens":
            found["scales"]["n_tokens (the targets that count)"] = float(_np(value))
            sizes["n_tokens (the targets that count)"] = float(_np(value))
        elif field == "ids" and backend.is_array(value):
            found["ids"] = backend.np.asarray(backend.asnumpy(value))
        elif field in ("V", "vocab_size") and isinstance(value, int):
            sizes.setdefault("V (the vocabulary)", float(value))
        elif field in _AXES and backend.is_array(value):
            for axis, name in _AXES[field]:
                if value.ndim >= (-axis if axis < 0 else axis + 1):
                    sizes.setdefault(name, float(value.shape[axis]))
        else:
            cache_facts(value, where, found, depth + 1)
    return found


def _generic(name: str, says: str, hint: str) -> Mistake:
    return Mistake(f"generic:{name}", says, hint, {})


def diagnose(ex, mine: list, ref: list, wrong: list, facts: list | None = None) -> list:
    """``[(Mistake, [tensors])]`` for the wrong tensors that a generic check explains."""
    facts = facts or [{} for _ in ref]
    link = ex.link().split(" (")[0]
    labels = ex.case_labels()
    found, named = [], set()
    for t in wrong:
        pairs = _pairs(mine, ref, t)
        if not pairs or any(a.shape != b.shape for a, b in pairs):
            continue
        if ex.kind == "optimizer" and t == "theta":  # what a step did: theta's change
            pairs = [(backend.np.diff(a, axis=0), backend.np.diff(b, axis=0)) for a, b in pairs]
            t = "theta's change at a step"
        m = _one(t, pairs, facts, link)
        if m is not None:
            found.append(([t.split("'")[0]], m))
            named.add(t.split("'")[0])
    found += _swapped(mine, ref, [t for t in wrong if t not in named], link)
    named |= {t for tensors, _ in found for t in tensors}
    for t in wrong:  # right on some inputs, wrong on others: which is a clue
        if t not in named:
            m = _some_inputs(t, _pairs(mine, ref, t), labels)
            if m is not None:
                found.append(([t], m))
    return [(m, tensors) for tensors, m in found]


def _one(t: str, pairs: list, facts: list, link: str) -> Mistake | None:
    """Zeros, a sign, a constant factor, a factor per row, an error only on masked
    entries or repeated ids: the first that explains ``t`` on every input."""
    if all(float(abs(a).max(initial=0.0)) == 0.0 for a, _ in pairs):
        says = f"{t} is zero on every entry of every input"
        return _generic("zero", says, f"never computed, or never added ({link})")
    cs = _factor(pairs)
    if cs and all(math.isclose(c, -1.0, rel_tol=1e-6) for c in cs):
        look = f"a minus sign lost or added: check each step's sign against {link}"
        return _generic("sign", f"{t} has the wrong sign: yours = -right on every entry", look)
    if cs and not all(math.isclose(c, 1.0, rel_tol=1e-6) for c in cs):
        return _factor_mistake(t, cs, facts, link)
    if _row_factor(pairs):
        return _generic("row-factor", f"{t} = the right {t} times a factor that is constant "
                        "along each row (the last axis) and differs between rows",
                        "a per-row quantity (1/std, a row sum, a normaliser) used once too "
                        f"often or missing ({link})")
    return _only_where(pairs, facts, t)


def _row_factor(pairs: list) -> bool:
    """yours = c_row right, c constant along the last axis, not one number overall."""
    np = backend.np
    varies = False
    for a, b in _nonzero(pairs):
        if a.ndim < 2:
            return False
        a2, b2 = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
        c = (a2 * b2).sum(axis=1) / np.maximum((b2 * b2).sum(axis=1), 1e-300)
        if not _close(a2, c[:, None] * b2):
            return False
        live = np.abs(b2).max(axis=1) > 0
        varies = varies or (
            live.sum() > 1 and float(np.ptp(c[live])) > 1e-6 * float(np.abs(c[live]).max())
        )
    return varies


def _some_inputs(t: str, pairs: list, labels: list) -> Mistake | None:
    """Right on some inputs and wrong on the others: the ones it is wrong on, named."""
    if len(pairs) != len(labels) or len(pairs) < 2:
        return None
    ok = [_close(a, b) for a, b in pairs]
    if all(ok) or not any(ok):
        return None
    bad = [label for label, good in zip(labels, ok) if not good]
    right = [label for label, good in zip(labels, ok) if good]
    return _generic("some-inputs", f"{t} is right on {len(right)} of {len(labels)} inputs and "
                    f"wrong on: {'; '.join(bad[:3])}", "what those inputs have that the others "
                    f"do not (right on: {'; '.join(right[:3])})")


def _factor_mistake(t: str, cs: list, facts: list, link: str) -> Mistake:
    """yours = c right: c named after the scale that explains it on every input where
    c is not 1 (an input where the factor is 1, dropout off, explains nothing)."""
    causes = None
    for c, fact in zip(cs, facts):
        if math.isclose(c, 1.0, rel_tol=1e-6):
            continue
        scales = {**fact.get("scales", {}), "2": 2.0}
        here = {k: _name_factor(c, {k: v}) for k, v in scales.items()}
        here = {k: v for k, v in here.items() if v}
        causes = here if causes is None else {k: v for k, v in causes.items() if k in here}
    causes = list((causes or {}).values())
    if not causes:  # a size of the inputs (V, S, T, B, d_k, n_tokens, D, their roots)
        causes = _size_causes(cs, facts)
    values = []
    for c in cs:
        if f"{c:.4g}" not in values:
            values.append(f"{c:.4g}")
    on = "on every entry" + ("" if len(values) == 1 else " of each input")
    says = f"{t} = {' or '.join(values[:4])} x the right {t}, {on}"
    if causes:
        says += f": the factor is {' or '.join(causes[:2])}"
        look = f"{causes[0]} applied twice, missing, or inverted ({link})"
    else:
        look = f"a scale applied twice, missing or inverted, a sum for a mean ({link})"
    if "2" in causes:
        look = f"a gradient added twice, or a 1/2 missing ({link})"
    # a factor that differs between the inputs and matches no size says where, not what
    return _generic("factor" if causes or len(values) == 1 else "factors", says, look)


def _size_causes(cs: list, facts: list) -> list[str]:
    """The sizes of the inputs that ``c`` is on every input where it is not 1."""
    names = None
    for c, fact in zip(cs, facts):
        if math.isclose(c, 1.0, rel_tol=1e-6):
            continue
        here = size_names(c, fact.get("sizes", {}))
        names = here if names is None else [n for n in names if n in here]
    return names or []


def _only_where(pairs: list, facts: list, t: str) -> Mistake | None:
    """Wrong only at entries whose right gradient is zero, or only on repeated ids' rows."""
    np = backend.np
    off = [(np.abs(a - b) > MATCH_TOL * max(float(np.abs(b).max(initial=0.0)), 1e-12), b)
           for a, b in pairs]
    if not any(bad.any() for bad, _ in off):
        return None
    if all((b[bad] == 0.0).all() for bad, b in off):
        return _generic("masked", f"{t} is wrong only at entries where the right {t} is zero: "
                        "masked or padded positions", "what is masked or padding in the "
                        "forward gets no gradient at all")
    repeated = []
    for (bad, _), fact in zip(off, facts):
        ids = fact.get("ids")
        if ids is None or bad.ndim < 1 or bad.shape[0] <= int(ids.max(initial=0)):
            return None
        counts = np.bincount(ids.reshape(-1), minlength=bad.shape[0])
        rows = bad.reshape(bad.shape[0], -1).any(axis=1)
        repeated.append(not rows.any() or bool((counts[rows] > 1).all()))
    if repeated and all(repeated):
        return _generic("repeated", f"{t} is wrong only on the rows of ids used more than "
                        "once", "an id at several positions gets the sum of their gradients: "
                        "a fancy-indexed += keeps one of them")
    return None


def _swapped(mine: list, ref: list, wrong: list, link: str) -> list:
    found = []
    for i, a in enumerate(wrong):
        for b in wrong[i + 1 :]:
            ok = all(
                a in m and b in m and _close(_np(m[a]), _np(r[b])) and _close(_np(m[b]), _np(r[a]))
                for m, r in zip(mine, ref)
                if a in r and b in r
            )
            if ok:
                found.append(([a, b], _generic("swapped", f"{a} and {b} are swapped: each is "
                                               "the other's right value", "return them in the "
                                               f"order the docstring gives ({link})")))
    return found


__all__ = ["cache_facts", "diagnose", "shape_scales", "shape_sizes"]
