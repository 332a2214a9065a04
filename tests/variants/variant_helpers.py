"""Helpers for the variant tests: a finite-difference check of any model with
``loss_forward(*inputs, rng=...)`` / ``loss_backward(cache)`` (the language model and
the classifier), and a random tiny configuration per attention variant."""

import copy

from scratchformer.engine import device
from scratchformer.engine.backend import xp
from scratchformer.engine.gradcheck import check_gradients
from scratchformer.engine.models import TransformerConfig

VARIANTS = ["dense", "relative", "relative_skew", "local"]


def config(V=13, attention="dense", **kw):
    """``tiny`` (N=2, D=16, H=2, Dh=8) with k=2 and blocks of 3, so that clipping and
    several blocks happen at the test lengths."""
    base = dict(vocab_size=V, attention=attention, max_relative_position=2, local_block=3)
    if attention in ("relative_skew", "local"):
        base["encoder_attention"] = "dense"
    base.update(kw)
    return TransformerConfig.preset("tiny", **base)


def check_loss_model(model, *inputs, rng=None, max_entries=20, names=None, **loss_kw):
    """Every parameter of ``model.loss_forward(*inputs)`` against central differences,
    in float64 on a copy; dropout replayed from ``rng`` (an int seed)."""
    m = copy.deepcopy(model).astype(xp.float64)

    def fresh():
        return device.generator(rng) if rng is not None else None

    loss, cache = m.loss_forward(*inputs, rng=fresh(), **loss_kw)
    m.zero_grad()
    m.loss_backward(cache)

    def f():
        return m.loss_forward(*inputs, rng=fresh(), **loss_kw)[0]

    params, grads = m.parameters(), m.gradients()
    if names is not None:
        params = {k: params[k] for k in names}
    return check_gradients(f, params, {k: grads[k] for k in params}, max_entries=max_entries), list(
        params
    )
