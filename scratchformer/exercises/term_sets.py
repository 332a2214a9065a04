"""Which exercise's backward is read as which named terms (terms.py), and how the
terms' findings join the generic ones (generic.py) in ``check``'s diagnosis: a finding
that says only where (right on some inputs, a factor per row, factors that differ
between inputs) gives way to the term that says what. Adam, with no terms, is compared
step by step (adam_steps.py)."""

from __future__ import annotations

from scratchformer.exercises import adam_steps, terms, terms_attention, terms_layers, terms_ops
from scratchformer.exercises.spec import Mistake
from scratchformer.exercises.terms import TermSet


def term_set(name: str) -> TermSet | None:
    """The exercise ``name``'s backward as named terms, or None."""
    for module in (terms_ops, terms_attention, terms_layers):
        found = getattr(module, name.upper(), None)
        if isinstance(found, TermSet):
            return found
    return None


#: generic findings a term's name replaces: they say where, not what
WEAK = ("generic:some-inputs", "generic:row-factor", "generic:factors")


def _strong(m: Mistake) -> bool:
    """A generic finding that says what is wrong (a sign, zeros, swapped outputs, a
    constant factor, masked entries, repeated ids), not only where."""
    return m.name not in WEAK


def with_terms(ex, mine: list, ref: list, wrong: list, facts: list, generic: list) -> list:
    """``generic``'s findings, with each wrong gradient that none of them names read as
    the reference with one term changed; a term's name replaces what only said where."""
    if ex.kind == "optimizer":  # Adam: no terms, its moments compared step by step
        found = adam_steps.diagnose(ex, mine, ref)
        if len(found) > 1:  # one change of the update gives the learner's numbers
            return [(m, tensors) for m, tensors in generic if _strong(m)] + found
        return found + generic
    ts = term_set(ex.name)
    if ts is None:
        return generic
    named = {t for m, tensors in generic if _strong(m) for t in tensors}
    found = terms.diagnose(ex, ts, mine, ref, [t for t in wrong if t not in named], facts)
    explained = {t for _, tensors in found for t in tensors}
    kept = [(m, tensors) for m, tensors in generic
            if _strong(m) or not set(tensors) <= explained]
    return kept + found


__all__ = ["WEAK", "term_set", "with_terms"]
