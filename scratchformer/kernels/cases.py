"""Inputs for checking an op's implementations: a few cases per table, made fresh from a
seed in a given dtype, chosen where implementations go wrong (odd sizes, T != S != Dh,
more than one head, a query row with nothing to see, padding, a repeated id, dropout on).

``CASES[name](r, dtype)`` returns ``[Case, ...]`` for the table ``name``; a ``Seed(n)``
in a case's keywords stands for a fresh dropout generator seeded with ``n`` (each run
of the case gets its own, so two implementations draw the same masks).

Dimension key: ``B`` batch, ``H`` heads, ``T`` queries, ``S`` keys, ``Dh`` d_k,
``Dv`` d_v, ``D`` features, ``V`` vocabulary, ``L`` length, ``M`` block.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scratchformer import backend
from scratchformer.backend import np
from scratchformer.ops.relative_attention import relative_index


@dataclass(frozen=True)
class Seed:
    """A dropout generator seeded with ``n``, made afresh for each run of a case (the
    counter-based one with ``counter``: the draws every device and kernel shares)."""

    n: int
    counter: bool = False


@dataclass
class Case:
    label: str
    args: tuple
    kwargs: dict = field(default_factory=dict)


def _randn(r, shape, dtype):
    return backend.asarray(r.standard_normal(shape), dtype=dtype)


def _mask(r, shape, empty_row=True):
    """A random bool mask (True: may attend) with, optionally, one row that sees nothing."""
    m = r.random(shape) > 0.3
    if empty_row:
        m[(-1,) * (len(shape) - 2) + (0,)] = False
    return backend.asarray(m)


def _ids(r, shape, V, pad=None):
    ids = r.integers(1 if pad == 0 else 0, V, shape)
    ids[0, 0] = ids[0, -1] = ids.flat[1]  # a repeated id
    if pad is not None:
        ids[-1, -2:] = pad  # padding at the end of the last row
    return backend.asarray(ids)


def _linear(r, dt):
    x, W, b = _randn(r, (2, 3, 5), dt), _randn(r, (5, 4), dt), _randn(r, (4,), dt)
    return [Case("with bias", (x, W, b)), Case("no bias", (x, W))]


def _embedding(r, dt):
    E = _randn(r, (7, 5), dt)
    return [
        Case("pad 0, repeated ids", (_ids(r, (3, 4), 7, pad=0), E, 0)),
        Case("no pad", (_ids(r, (2, 5), 7), E)),
    ]


def _positional(r, dt):
    x, P = _randn(r, (2, 4, 6), dt), _randn(r, (10, 6), dt)
    return [Case("offset 0", (x, P)), Case("offset 3", (x, P, 3))]


def _dropout(r, dt):
    x = _randn(r, (2, 3, 5), dt)
    return [
        Case("p 0.3", (x, 0.3), {"rng": Seed(4, counter=True)}),
        Case("p 0.3, odd size", (x[..., :3], 0.3), {"rng": Seed(5, counter=True)}),
        Case("off", (x, 0.3)),
    ]


def _layernorm(r, dt):
    x, g, b = _randn(r, (2, 3, 7), dt), _randn(r, (7,), dt), _randn(r, (7,), dt)
    return [Case("D 7", (x, g, b, 1e-5))]


def _pointwise(r, dt):
    return [Case("(2, 3, 5)", (_randn(r, (2, 3, 5), dt),))]


def _softmax(r, dt):
    x = _randn(r, (2, 3, 4, 7), dt)
    return [Case("masked, an empty row", (x, _mask(r, (2, 1, 4, 7)))), Case("no mask", (x,))]


def _log_softmax(r, dt):
    return [Case("(3, 7)", (_randn(r, (3, 7), dt),))]


def _qkv(r, dt, T=5, S=7, Dh=4, Dv=6):
    return (
        _randn(r, (2, 3, T, Dh), dt),
        _randn(r, (2, 3, S, Dh), dt),
        _randn(r, (2, 3, S, Dv), dt),
    )


def _attention_core(r, dt):
    Z, V = _randn(r, (2, 3, 5, 7), dt), _randn(r, (2, 3, 7, 6), dt)
    mask = _mask(r, (2, 1, 5, 7))
    return [
        Case("masked, an empty row", (Z, V, mask)),
        Case("dropout 0.25", (Z, V, mask, 0.25), {"rng": Seed(9)}),
    ]


def _attention(r, dt):
    Q, K, V = _qkv(r, dt)
    mask = _mask(r, (2, 1, 5, 7))
    return [
        Case("masked, an empty row", (Q, K, V, mask)),
        Case("dropout 0.25", (Q, K, V, mask, 0.25), {"rng": Seed(9)}),
        Case("no mask", (Q, K, V)),
    ]


def _blockwise(r, dt):
    Q, K, V = _qkv(r, dt)
    mask = _mask(r, (2, 1, 5, 7))
    return [
        Case("block 2, masked", (Q, K, V, mask, 2)),
        Case("block 3, dropout 0.25", (Q, K, V, mask, 3, 0.25), {"rng": Seed(9)}),
    ]


def _local(r, dt):
    Q, K, V = _qkv(r, dt, T=7, S=7)
    keys = np.ones((2, 1, 1, 7), dtype=bool)
    keys[1, ..., 5:] = False
    keys = backend.asarray(keys)
    Qd, Kd, Vd = _qkv(r, dt, T=2, S=7)
    return [
        Case("L 7, block 3, padding", (Q, K, V, 3, keys)),
        Case("dropout 0.25", (Q, K, V, 3, keys, 0.25), {"rng": Seed(9)}),
        Case("decoding: 2 queries at offset 5", (Qd, Kd, Vd, 3, None, 0.0, None, 5)),
    ]


def _shaw_logits(r, dt):
    Q, K, _ = _qkv(r, dt)
    E_k = _randn(r, (5, 4), dt)
    return [Case("k 2, offset 0", (Q, K, E_k)), Case("k 2, offset 2", (Q, K, E_k, 2))]


def _shaw_values(r, dt):
    O, A, E_v = _randn(r, (2, 3, 5, 6), dt), _randn(r, (2, 3, 5, 7), dt), _randn(r, (5, 6), dt)
    return [Case("k 2, offset 2", (O, A, E_v, relative_index(5, 7, 2, 2)))]


def _skew_logits(r, dt):
    Q, K, _ = _qkv(r, dt, T=6, S=6)
    Qd, Kd, _ = _qkv(r, dt, T=2, S=6)
    E_r = _randn(r, (3, 3, 4), dt)
    return [Case("skew form, L 6, k 2", (Q, K, E_r)), Case("gather form", (Qd, Kd, E_r, 4))]


def _targets(r):
    t = r.integers(1, 7, (3, 4))
    t[-1, -1] = 0  # a padded target
    return backend.asarray(t)


def _label_smoothed_nll(r, dt):
    x = r.standard_normal((3, 4, 7))
    lp = x - np.log(np.exp(x).sum(-1, keepdims=True))
    return [Case("eps 0.1, pad 0", (backend.asarray(lp, dtype=dt), _targets(r), 0.1, 0))]


def _cross_entropy(r, dt):
    logits = _randn(r, (3, 4, 7), dt)
    return [
        Case("eps 0.1, pad 0", (logits, _targets(r), 0.1, 0)),
        Case("eps 0", (logits, _targets(r))),
    ]


#: the cases of each table
CASES = {
    "linear": _linear,
    "embedding": _embedding,
    "positional": _positional,
    "dropout": _dropout,
    "layernorm": _layernorm,
    "relu": _pointwise,
    "gelu": _pointwise,
    "tanh": _pointwise,
    "softmax": _softmax,
    "log_softmax": _log_softmax,
    "attention_core": _attention_core,
    "attention": _attention,
    "blockwise_attention": _blockwise,
    "local_attention": _local,
    "shaw_logits": _shaw_logits,
    "shaw_values": _shaw_values,
    "skew_logits": _skew_logits,
    "label_smoothed_nll": _label_smoothed_nll,
    "cross_entropy": _cross_entropy,
}

#: the names of the gradients each table's backward returns, in order
GRADIENTS = {
    "linear": ("dx", "dW", "db"),
    "embedding": ("dE",),
    "positional": ("dx", "dP"),
    "dropout": ("dx",),
    "layernorm": ("dx", "dgamma", "dbeta"),
    "relu": ("dx",),
    "gelu": ("dx",),
    "tanh": ("dx",),
    "softmax": ("dx",),
    "log_softmax": ("dx",),
    "attention_core": ("dZ", "dV"),
    "attention": ("dQ", "dK", "dV"),
    "blockwise_attention": ("dQ", "dK", "dV"),
    "local_attention": ("dQ", "dK", "dV"),
    "shaw_logits": ("dQ", "dK", "dE_k"),
    "shaw_values": ("dA_drop", "dE_v"),
    "skew_logits": ("dQ", "dK", "dE_r"),
    "label_smoothed_nll": ("dlprobs",),
    "cross_entropy": ("dlogits",),
}

__all__ = ["CASES", "GRADIENTS", "Case", "Seed"]
