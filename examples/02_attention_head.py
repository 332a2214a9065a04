"""One attention head, forward and backward, every shape printed and every gradient proven.

    python examples/02_attention_head.py

A head of encoder-decoder attention: T = 3 decoder positions ask questions (queries)
of S = 5 source positions (keys and values). d_model D = 6, one head of width Dh = 4,
batch B = 2; the second source sentence has 2 padding positions, which are masked.

    Q = x W_q   K = m W_k   V = m W_v                        projections
    Z = Q K^T / sqrt(Dh)                                     scores
    A = softmax(Z, mask)                                     weights, each row sums to 1
    O = A V                                                  output
    L = sum(O * dO)                                          a scalar: dO is its gradient

The backward pass is written out below step by step, the same steps as
scratchformer.engine.ops.attention_backward (docs/derivations.md#scaled-dot-product-attention),
then every gradient is compared with float64 central differences.
"""

import math

import numpy as np

from scratchformer.engine.gradcheck import check_gradients
from scratchformer.engine.ops import attention_backward, attention_forward, softmax_backward

rng = np.random.default_rng(0)
B, T, S, D, Dh = 2, 3, 5, 6, 4
x = rng.standard_normal((B, T, D))  # decoder states: the queries come from here
m = rng.standard_normal((B, S, D))  # encoder output ("memory"): keys and values
W_q, W_k, W_v = (rng.standard_normal((D, Dh)) / math.sqrt(D) for _ in range(3))
lengths = np.array([5, 3])  # the second source has 2 pads
mask = (np.arange(S)[None, :] < lengths[:, None])[:, None, None, :]  # (B, 1, 1, S)
dO = rng.standard_normal((B, 1, T, Dh))  # dL/dO for L = sum(O * dO)


def show(name, a, what=""):
    print(f"  {name:<8} {str(a.shape):<16} {what}")


def forward(x, m, W_q, W_k, W_v):
    # One head: (B, T, Dh) -> (B, 1, T, Dh), the shape attention_forward expects (H = 1).
    Q = (x @ W_q)[:, None]
    K = (m @ W_k)[:, None]
    V = (m @ W_v)[:, None]
    O, cache = attention_forward(Q, K, V, mask)
    return O, cache


print(f"forward (B={B} sentences, T={T} queries, S={S} keys, D={D}, Dh={Dh})")
O, cache = forward(x, m, W_q, W_k, W_v)
Q, K, V, A = cache.logits.Q, cache.logits.K, cache.core.V, cache.core.softmax.P
show("x", x, "decoder states (B, T, D)")
show("m", m, "encoder output (B, S, D)")
show("Q", Q, "x W_q (B, H=1, T, Dh)")
show("K", K, "m W_k (B, H=1, S, Dh)")
show("V", V, "m W_v (B, H=1, S, Dh)")
Z = (Q @ K.swapaxes(-1, -2)) / math.sqrt(Dh)
show("Z", Z, f"Q K^T / sqrt({Dh}) (B, H, T, S): one score per (query, key)")
show("A", A, "softmax over the keys (B, H, T, S)")
show("O", O, "A V (B, H, T, Dh): each query's weighted mix of values")
print("\nweights of sentence 1 (its keys 3 and 4 are padding, so they get exactly 0):")
print(np.array2string(A[1, 0], precision=3, suppress_small=True))
ok = bool(np.allclose(A.sum(-1), 1.0)) and bool((A[1, 0, :, 3:] == 0).all())
print(f"rows sum to 1 and padded keys get weight 0: {ok}")

print("\nbackward, step by step (reverse order of the forward):")
show("dO", dO, "given: dL/dO")
dA = dO @ V.swapaxes(-1, -2)
show("dA", dA, "3. O = A V        ->  dA = dO V^T")
dV = A.swapaxes(-1, -2) @ dO
show("dV", dV, "                      dV = A^T dO")
dZ = A * (dA - (dA * A).sum(-1, keepdims=True))
show("dZ", dZ, "2. A = softmax(Z) ->  dZ = A * (dA - sum(dA * A, keys))")
dZ_scaled = dZ / math.sqrt(Dh)
dQ = dZ_scaled @ K
show("dQ", dQ, "1. Z = Q K^T / sqrt(Dh) -> dQ = dZ K / sqrt(Dh)")
dK = dZ_scaled.swapaxes(-1, -2) @ Q
show("dK", dK, " " * 27 + "dK = dZ^T Q / sqrt(Dh)  (not Q^T dZ)")
dW_q = np.einsum("btd,bte->de", x, dQ[:, 0])
dW_k = np.einsum("bsd,bse->de", m, dK[:, 0])
dW_v = np.einsum("bsd,bse->de", m, dV[:, 0])
show("dW_q", dW_q, "0. Q = x W_q -> dW_q = sum over b, t of x^T dQ")
show("dW_k", dW_k, " " * 16 + "dW_k = sum over b, s of m^T dK")
show("dW_v", dW_v, " " * 16 + "dW_v = sum over b, s of m^T dV")
dx = dQ[:, 0] @ W_q.T
dm = dK[:, 0] @ W_k.T + dV[:, 0] @ W_v.T
show("dx", dx, "dx = dQ W_q^T")
show("dm", dm, "dm = dK W_k^T + dV W_v^T: m feeds both K and V, so both paths add")

# The library's backward must agree with the steps written out above.
lib_dQ, lib_dK, lib_dV = attention_backward(dO, cache)
same = all(np.allclose(a, b) for a, b in [(lib_dQ, dQ), (lib_dK, dK), (lib_dV, dV)])
same = same and np.allclose(softmax_backward(dA, cache.core.softmax), dZ)
print(f"\nthe hand-written steps equal scratchformer.engine.ops.attention_backward: {same}")

print("\nevery gradient against float64 central differences (L(w + h) - L(w - h)) / 2h:")
arrays = {"x": x, "m": m, "W_q": W_q, "W_k": W_k, "W_v": W_v}
grads = {"x": dx, "m": dm, "W_q": dW_q, "W_k": dW_k, "W_v": dW_v}


def L():
    return float((forward(x, m, W_q, W_k, W_v)[0] * dO).sum())


report = check_gradients(L, arrays, grads)
print(report.table())
# Q, K, V themselves: through the op, without the projections.
qkv = {"Q": Q.copy(), "K": K.copy(), "V": V.copy()}
report_qkv = check_gradients(
    lambda: float((attention_forward(qkv["Q"], qkv["K"], qkv["V"], mask)[0] * dO).sum()),
    qkv,
    {"Q": dQ, "K": dK, "V": dV},
)
print(report_qkv.table())
print(
    f"\npadded keys get no gradient: |dK| and |dV| at sentence 1, keys 3-4 = "
    f"{float(abs(dK[1, 0, 3:]).max() + abs(dV[1, 0, 3:]).max()):.1e}"
)
worst = max(report.max_rel_error, report_qkv.max_rel_error)
print(f"largest relative error over all checks: {worst:.1e} (tolerance {report.tol:.0e})")

passed = ok and same and report.passed and report_qkv.passed
print("\nattention head:", "every gradient PROVEN" if passed else "FAILED")
raise SystemExit(0 if passed else 1)
