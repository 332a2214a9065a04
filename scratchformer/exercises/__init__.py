"""Exercises: write the backward passes yourself, graded by the gradient checker, then
train the Transformer with them.

    scratchformer exercise list                 where you stand, in teaching order
    scratchformer exercise start layernorm      writes exercises/layernorm.py
    scratchformer exercise check layernorm      grades it
    scratchformer exercise hint layernorm       the next hint
    scratchformer exercise solution layernorm   the engine's code and its derivation
    scratchformer exercise train                the verdict on your passes, then a run with them

The exercises, in teaching order (``EXERCISES``): the ops (ops_basic.py, ops_norm_loss.py,
ops_attention.py, ops_relative.py: op.py says how a learner's backward enters the kernel
seam), the layers (layers.py, encoder_decoder.py: layer.py says how a learner's backward becomes a
module's method), and Adam's update (adam.py). ``grade`` (grade.py) checks a learner's
code, with guard.py (inputs left unchanged), draw.py and draw_layers.py (shapes drawn
per run), generic.py (what the numbers say) and shortcuts.py; isolate.py runs the
learner's code in a process of its own that only computes (learner.py) and judges in
this one: wire.py is what passes between them, procs.py ends what the code started,
sandbox.py puts back what it changed; verdict.py is ``exercise train``'s verdict;
``files`` writes and reads the learner's folder, where all progress lives: a file per
exercise started, re-checked whenever progress is asked for, and the hints shown so far.
"""

from __future__ import annotations

import difflib

from scratchformer.engine.errors import ScratchformerError
from scratchformer.exercises.adam import ADAM
from scratchformer.exercises.encoder_decoder import DECODER_LAYER, ENCODER_LAYER
from scratchformer.exercises.layers import ADD_NORM, FFN, MULTI_HEAD_ATTENTION
from scratchformer.exercises.ops_attention import ATTENTION
from scratchformer.exercises.ops_basic import EMBEDDING, GELU, LINEAR, RELU, SOFTMAX
from scratchformer.exercises.ops_norm_loss import CROSS_ENTROPY, DROPOUT, LAYERNORM
from scratchformer.exercises.ops_relative import SHAW, SKEW
from scratchformer.exercises.spec import Exercise, LearnerError, Mistake

#: every exercise, in teaching order: a single op first, whole layers and Adam last
EXERCISES: dict[str, Exercise] = {
    ex.name: ex
    for ex in (
        LINEAR,
        RELU,
        GELU,
        EMBEDDING,
        SOFTMAX,
        LAYERNORM,
        DROPOUT,
        CROSS_ENTROPY,
        ATTENTION,
        MULTI_HEAD_ATTENTION,
        FFN,
        ADD_NORM,
        ENCODER_LAYER,
        DECODER_LAYER,
        SHAW,
        SKEW,
        ADAM,
    )
}


class UnknownExercise(ScratchformerError):
    """A name that is no exercise."""


def exercise(name: str) -> Exercise:
    """The exercise called ``name``; UnknownExercise, with the closest names, if none."""
    if name in EXERCISES:
        return EXERCISES[name]
    close = difflib.get_close_matches(name, list(EXERCISES), n=1, cutoff=0.5)
    guess = f"; did you mean {close[0]}?" if close else ""
    raise UnknownExercise(
        f"no exercise named {name!r}{guess} (scratchformer exercise list shows them all)"
    )


__all__ = ["EXERCISES", "Exercise", "LearnerError", "Mistake", "UnknownExercise", "exercise"]
