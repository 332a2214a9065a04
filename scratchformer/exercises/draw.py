"""Inputs drawn afresh on every run of ``check``: shapes no learner's file can know.

Each maker takes a host generator ``r`` (seeded with the run's seed, printed by
``check``) and returns two inputs: one with a batch of 1 and one with more, one of them
2-D and the other 3-D where the op takes any number of leading axes. A backward that
wrote a size of the designed inputs into its code (``reshape(6, 4)``) fails here.
"""

from __future__ import annotations

from scratchformer.engine import backend
from scratchformer.engine.ops.cases import Case, Seed, randn
from scratchformer.exercises.spec import DRAWN


def leads(r) -> list[tuple]:
    """Two leading shapes: batch 1 and batch 2 or 3, one of them (rows,) and the other
    (batch, positions), in an order drawn too."""
    one = [(1, int(r.integers(2, 6))), (int(r.integers(2, 4)),)]
    many = [(int(r.integers(2, 5)),), (int(r.integers(2, 4)), int(r.integers(2, 6)))]
    if r.random() < 0.5:
        return [one[0], many[0]]
    return [(1,), many[1]]


def padding_mask(lengths: list[int], width: int):
    """(B, 1, 1, width) bool: True at the first ``lengths[b]`` positions of row b."""
    np = backend.np
    mask = np.arange(width)[None, :] < np.asarray(lengths)[:, None]
    return backend.asarray(mask[:, None, None, :])


def size(r, low: int = 2, high: int = 8) -> int:
    return int(r.integers(low, high))


def label(**shapes) -> str:
    return f"{DRAWN}: " + ", ".join(f"{k} {tuple(v)}" for k, v in shapes.items())


def linear(r, dt):
    found = []
    for n, lead in enumerate(leads(r)):
        d_in, d_out = size(r), size(r)
        x, W = randn(r, (*lead, d_in), dt), randn(r, (d_in, d_out), dt)
        args = (x, W, randn(r, (d_out,), dt)) if n == 0 else (x, W)
        found.append(Case(label(x=x.shape, W=W.shape) + ("" if n else ", bias"), args))
    return found


def pointwise(r, dt):
    found = []
    for lead in leads(r):
        x = randn(r, (*lead, size(r)), dt)
        found.append(Case(label(x=x.shape), (x,)))
    return found


def layernorm(r, dt):
    found = []
    for lead in leads(r):
        d = size(r, 3)
        x = randn(r, (*lead, d), dt) * 2.0 + 1.0
        found.append(Case(label(x=x.shape), (x, randn(r, (d,), dt), randn(r, (d,), dt), 1e-5)))
    return found


def dropout(r, dt):
    found = []
    for n, lead in enumerate(leads(r)):
        x = randn(r, (*lead, size(r)), dt)
        p = round(float(r.uniform(0.1, 0.5)), 2)
        found.append(
            Case(label(x=x.shape) + f", p {p}", (x, p), {"rng": Seed(20 + n, counter=True)})
        )
    return found


def softmax(r, dt):
    found = []
    for n, lead in enumerate(leads(r)):
        x = randn(r, (*lead, size(r, 3)), dt)
        if n == 0:
            found.append(Case(label(x=x.shape), (x,)))
            continue
        m = r.random(x.shape) > 0.3
        m[(0,) * (x.ndim - 1)] = False  # a row with nothing allowed
        found.append(Case(label(x=x.shape) + ", masked", (x, backend.asarray(m))))
    return found


def embedding(r, dt):
    """ids (B, T) as the docstring promises (a batch of 1, then of more): the lookup is
    of token ids of sentences, and a pass may read ``B, T, D = dout.shape``."""
    found = []
    for n, lead in enumerate([(1, size(r, 2, 6)), (size(r, 2, 4), size(r, 2, 6))]):
        V, D = size(r, 4, 9), size(r)
        ids = r.integers(1, V, lead)
        ids.flat[-1] = ids.flat[0]  # a repeated id
        E = randn(r, (V, D), dt)
        if n == 0:
            found.append(Case(label(ids=ids.shape, E=E.shape), (backend.asarray(ids), E)))
        else:
            ids.flat[1] = 0
            found.append(
                Case(label(ids=ids.shape, E=E.shape) + ", pad 0", (backend.asarray(ids), E, 0))
            )
    return found


def cross_entropy(r, dt):
    found = []
    for n, lead in enumerate(leads(r)):
        V = size(r, 4, 9)
        target = r.integers(1, V, lead)
        logits = randn(r, (*lead, V), dt)
        if n == 0:
            found.append(Case(label(logits=logits.shape), (logits, backend.asarray(target), 0.1)))
        else:
            target.flat[-1] = 0
            args = (logits, backend.asarray(target), 0.2, 0)
            found.append(Case(label(logits=logits.shape) + ", eps 0.2, pad 0", args))
    return found


def _qkv(r, dt, B, T, S):
    H, Dh, Dv = size(r, 1, 4), size(r), size(r)
    return randn(r, (B, H, T, Dh), dt), randn(r, (B, H, S, Dh), dt), randn(r, (B, H, S, Dv), dt)


def attention(r, dt):
    found = []
    for n, B in enumerate((1, size(r, 2, 4))):
        T, S = size(r), size(r)
        Q, K, V = _qkv(r, dt, B, T, S)
        shapes = label(Q=Q.shape, K=K.shape, V=V.shape)
        if n == 0:
            found.append(Case(shapes, (Q, K, V)))
        else:
            m = backend.asarray(r.random((B, 1, T, S)) > 0.3)
            found.append(
                Case(shapes + ", masked, dropout 0.2", (Q, K, V, m, 0.2), {"rng": Seed(21)})
            )
    return found


def shaw(r, dt):
    found = []
    for n, B in enumerate((1, size(r, 2, 4))):
        T, S = size(r), size(r)
        Q, K, _ = _qkv(r, dt, B, T, S)
        k = size(r, 1, 3)
        E_k = randn(r, (2 * k + 1, Q.shape[-1]), dt)
        args = (Q, K, E_k) if n == 0 else (Q, K, E_k, size(r, 1, 3))
        found.append(Case(label(Q=Q.shape, K=K.shape, E_k=E_k.shape), args))
    return found


def skew(r, dt):
    B = size(r, 2, 4)
    L = size(r, 3, 8)
    Q, K, _ = _qkv(r, dt, 1, L, L)
    E_r = randn(r, (Q.shape[1], size(r, 2, 4), Q.shape[-1]), dt)
    Qd = randn(r, (B, Q.shape[1], 2, Q.shape[-1]), dt)
    Kd = randn(r, (B, Q.shape[1], L, Q.shape[-1]), dt)
    return [
        Case(label(Q=Q.shape, E_r=E_r.shape) + ", skew form", (Q, K, E_r)),
        Case(label(Q=Qd.shape, K=Kd.shape) + ", gather form", (Qd, Kd, E_r, L - 2)),
    ]


__all__ = [
    "attention",
    "cross_entropy",
    "dropout",
    "embedding",
    "label",
    "layernorm",
    "leads",
    "padding_mask",
    "linear",
    "pointwise",
    "shaw",
    "size",
    "skew",
    "softmax",
]
