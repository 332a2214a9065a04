"""A masked softmax whose fully masked rows stay finite, forward and backward.

    python examples/04_masked_softmax.py

Attention masks a key by giving it no weight. When EVERY key of a query row is masked
(a padding query under a query-and-key padding mask, an empty sentence in a batch, a
local-attention window with nothing in it), the row has nothing to attend to. Three
ways to compute softmax over such a row:

    naive       set masked scores to -inf, then exp(x - max) / sum: the row max is
                -inf and -inf - (-inf) = NaN; one NaN row poisons the whole batch's
                gradient
    -1e9 fill   set masked scores to -1e9 (a common trick): finite, but a fully masked
                row becomes UNIFORM over all keys, padding included, so the query
                averages values it was told to ignore
    scratchformer.engine.ops.softmax_forward: a fully masked row is all zeros (the max of a
                row with no entry is replaced by 0, the zero sum by 1), every other row
                is an ordinary softmax; masked entries are exactly 0 and get exactly 0
                gradient
"""

import numpy as np

from scratchformer.engine.gradcheck import check_op
from scratchformer.engine.ops import (
    attention_backward,
    attention_forward,
    softmax_backward,
    softmax_forward,
)

rng = np.random.default_rng(0)


def naive_softmax(x, mask):
    x = np.where(mask, x, -np.inf)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def fill_softmax(x, mask):
    x = np.where(mask, x, -1e9)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# One sentence of 3 real tokens padded to 5; a query-and-key padding mask, so the two
# padding queries (rows 3 and 4) may attend to nothing.
T = 5
real = np.arange(T) < 3
mask = real[:, None] & real[None, :]  # (T, T): True where query t may see key s
scores = rng.standard_normal((T, T))
np.set_printoptions(precision=3, suppress=True)
print("mask (1 = may attend), rows = queries, columns = keys:")
print(mask.astype(int))

with np.errstate(invalid="ignore"):
    P_naive = naive_softmax(scores, mask)
P_fill = fill_softmax(scores, mask)
P, cache = softmax_forward(scores, mask)
print("\nnaive (-inf, then exp(x - max)):")
print(P_naive)
print("\n-1e9 fill:")
print(P_fill)
print("\nscratchformer.ops.softmax_forward:")
print(P)

# Large logits: exp(1000) overflows to inf, and inf / inf is NaN, unless the max is
# subtracted first (exp(x - max) <= 1), which softmax_forward does.
big = np.array([[1000.0, 999.0, 0.0]])
with np.errstate(over="ignore", invalid="ignore"):
    P_overflow = np.exp(big) / np.exp(big).sum(-1, keepdims=True)
P_big, _ = softmax_forward(big)
print(f"\nlogits {big[0]}: exp(x) / sum exp(x) = {P_overflow[0]}, softmax_forward = {P_big[0]}")

# Through attention: the fully masked queries output zeros, and the backward pass stays
# finite. B=1, H=2 heads, T=5 queries and keys, Dh=3.
Q, K, V = (rng.standard_normal((1, 2, T, 3)) for _ in range(3))
O, att_cache = attention_forward(Q, K, V, mask)
dQ, dK, dV = attention_backward(rng.standard_normal(O.shape), att_cache)
print(f"\nattention output of the padding queries (rows 3, 4), head 0:\n{O[0, 0, 3:]}")
grads_finite = all(np.isfinite(g).all() for g in (dQ, dK, dV))
print(f"dQ, dK, dV all finite: {grads_finite}; |dK| at padding keys: {abs(dK[0, :, 3:]).max()}")

# Prove both backward passes with the masks, fully masked rows included.
print("\nfinite-difference checks (float64, the fully masked rows included):")
rep_softmax = check_op(softmax_forward, softmax_backward, scores, mask)
rep_attention = check_op(attention_forward, attention_backward, Q, K, V, mask)
print(rep_softmax.table())
print(rep_attention.table())

checks = {
    "the naive softmax gives NaN on the fully masked rows": bool(np.isnan(P_naive[3:]).all()),
    "the -1e9 fill spreads fully masked rows uniformly over all keys": bool(
        np.allclose(P_fill[3:], 1 / T)
    ),
    "softmax_forward: fully masked rows are exactly 0": bool((P[3:] == 0).all()),
    "softmax_forward: masked entries are exactly 0": bool((P[~mask] == 0).all()),
    "softmax_forward: the other rows sum to 1": bool(np.allclose(P[:3].sum(-1), 1)),
    "softmax_forward is finite for logits of 1000": bool(np.isfinite(P_big).all()),
    "attention outputs 0 for queries with nothing to attend to": bool((O[0, :, 3:] == 0).all()),
    "attention gradients are finite": grads_finite,
    "softmax and attention backward passes match finite differences": rep_softmax.passed
    and rep_attention.passed,
}
print()
for what, ok in checks.items():
    print(f"  [{'ok' if ok else 'FAILED'}] {what}")
raise SystemExit(0 if all(checks.values()) else 1)
