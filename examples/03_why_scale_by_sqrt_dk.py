"""Why attention scores are divided by sqrt(d_k): a measurement, not a slogan.

    python examples/03_why_scale_by_sqrt_dk.py

The paper (section 3.2.1, footnote 4): if the components of q and k are independent
with mean 0 and variance 1, then q . k = sum_i q_i k_i has mean 0 and variance d_k.
Large logits push the softmax into regions where it is almost one-hot, and there its
gradient almost vanishes: the Jacobian of softmax is diag(p) - p p^T, which is 0 at a
one-hot p. Dividing by sqrt(d_k) brings the variance back to 1 for every d_k.

For each d_k we draw queries and S = 16 keys with N(0, 1) components and measure:

    variance of the logits        q . k   and   q . k / sqrt(d_k)
    saturation                    the average largest softmax weight of a row
                                  (1/S = 0.0625 is uniform, 1.0 is one-hot)
    gradient reaching the scores  the average |dZ| = |softmax_backward(dA)| for a
                                  random upstream gradient dA with N(0, 1) entries
"""

import math

import numpy as np

from scratchformer.engine.ops import softmax_backward, softmax_forward

rng = np.random.default_rng(0)
S, N = 16, 500  # keys per query, queries per measurement
D_K = [1, 4, 16, 64, 256, 1024]


def measure(logits):
    """(average largest weight, average |dZ|) of softmax over the last axis."""
    P, cache = softmax_forward(logits)
    dA = rng.standard_normal(P.shape)
    dZ = softmax_backward(dA, cache)
    return float(P.max(-1).mean()), float(np.linalg.norm(dZ, axis=-1).mean())


rows = []
for d_k in D_K:
    q = rng.standard_normal((N, 1, d_k))
    k = rng.standard_normal((N, S, d_k))
    raw = (q * k).sum(-1)  # (N, S) logits q . k
    scaled = raw / math.sqrt(d_k)
    rows.append((d_k, raw.var(), scaled.var(), *measure(raw), *measure(scaled)))

print(f"S = {S} keys per query, {N} queries per row; uniform weights would be 1/S = {1 / S:.4f}\n")
print(
    f"{'d_k':>5} | {'var(q.k)':>9} {'var(q.k/sqrt d_k)':>18} | "
    f"{'max weight':>10} {'scaled':>7} | {'|dZ|':>8} {'scaled':>7}"
)
print("-" * 79)
for d_k, v_raw, v_scaled, p_raw, g_raw, p_scaled, g_scaled in rows:
    print(
        f"{d_k:>5} | {v_raw:>9.1f} {v_scaled:>18.3f} | "
        f"{p_raw:>10.3f} {p_scaled:>7.3f} | {g_raw:>8.4f} {g_scaled:>7.4f}"
    )

d_big = rows[-1]
lo, hi = min(r[5] for r in rows), max(r[5] for r in rows)
print(
    f"""
Read the table:
- var(q.k) grows like d_k ({rows[0][1]:.2f} at d_k=1, {d_big[1]:.0f} at d_k={d_big[0]}); after
  dividing by sqrt(d_k) it stays near 1 at every width.
- Without scaling, the largest weight of a row approaches 1: at d_k={d_big[0]} the softmax
  is almost one-hot (average largest weight {d_big[3]:.3f}); with scaling it is {d_big[5]:.3f},
  between {lo:.3f} and {hi:.3f} at every width, because the scaled logits have variance 1
  whatever d_k is.
- The gradient that reaches the scores shrinks with saturation: at d_k={d_big[0]} it is
  {d_big[4]:.4f} without scaling against {d_big[6]:.4f} with it ({d_big[6] / d_big[4]:.0f}x larger).
  A saturated softmax passes little gradient back to W_q and W_k, so they learn slowly."""
)

checks = {
    "var(q.k) within 10% of d_k for every d_k": all(abs(r[1] / r[0] - 1) < 0.1 for r in rows),
    "var(q.k / sqrt(d_k)) within 10% of 1 for every d_k": all(abs(r[2] - 1) < 0.1 for r in rows),
    "unscaled softmax nearly one-hot at d_k=1024 (max weight > 0.9)": d_big[3] > 0.9,
    "scaled softmax not saturated at d_k=1024 (max weight < 0.5)": d_big[5] < 0.5,
    "scaling gives at least 5x more gradient at d_k=1024": d_big[6] > 5 * d_big[4],
}
print()
for what, ok in checks.items():
    print(f"  [{'ok' if ok else 'FAILED'}] {what}")
raise SystemExit(0 if all(checks.values()) else 1)
