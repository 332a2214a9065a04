"""Fingerprints of the engine's numbers on fixed inputs, to show that a change of the code
moves none of them: losses, every parameter's gradient, the parameters after two Adam
steps, and greedy and beam-search outputs, for every attention variant, in float32 and
float64.

    python benchmarks/seam_equality.py --save before.npz        # on the old tree
    python benchmarks/seam_equality.py --save after.npz         # on the new tree
    python benchmarks/seam_equality.py --compare before.npz after.npz

The comparison prints, per variant, dtype and quantity, "bitwise" when the arrays are
equal bit for bit, else the relative error max|a - b| / max|b| (the kernel seam's one
metric). Run both sides with the same NumPy and BLAS threads (the script pins one).

Variants (a tiny model: N=2, d_model=16, h=2, dropout 0.1 everywhere incl. attention):

    dense-post   the paper          dense-pre    pre-LN            learned      Table 3 E
    relative     Shaw, encoder+dec  skew         Music Transformer decoder
    local        local decoder      blockwise    query blocks of 3 gelu         GELU FFN
    lm-skew, lm-local, lm-dense     the decoder-only language model
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.getcwd())

VARIANTS = {
    "dense-post": {},
    "dense-pre": {"norm": "pre"},
    "learned": {"positions": "learned"},
    "relative": {"attention": "relative", "max_relative_position": 2},
    "skew": {"attention": "relative_skew", "encoder_attention": "dense",
             "max_relative_position": 2},
    "local": {"attention": "local", "encoder_attention": "dense", "local_block": 3},
    "blockwise": {"attention_block": 3},
    "gelu": {"activation": "gelu"},
}  # fmt: skip
LM_VARIANTS = {
    "lm-dense": {},
    "lm-skew": {"attention": "relative_skew", "max_relative_position": 2},
    "lm-local": {"attention": "local", "local_block": 3},
}


def _config(V, **over):
    from scratchformer.models import TransformerConfig

    base = dict(N=2, d_model=16, d_ff=24, h=2, P_drop=0.1, P_drop_attn=0.1, max_len=40)
    base.update(over)
    return TransformerConfig(vocab_size=V, **base)


def _batch(r, V, B=3, S=7, T=6):
    src = r.integers(3, V, (B, S))
    src[-1, -2:] = 0  # padding
    tgt_out = r.integers(3, V, (B, T))
    tgt_out[0, -1] = 2
    tgt_out[-1, -2:] = 0
    tgt_in = np.concatenate([np.ones((B, 1), dtype=np.int64), tgt_out[:, :-1]], axis=1)
    return src, tgt_in, tgt_out


def _train(model, inputs, targets, steps=2):
    """The loss and gradients of the first step, the parameters after ``steps`` steps."""
    from scratchformer import backend, device
    from scratchformer.optim import Adam

    flat = model.flatten()
    adam = Adam(flat)
    first = None
    for step in range(steps):
        flat.grads.fill(0)
        loss, cache = model.loss_forward(*inputs, targets, rng=device.generator(100 + step))
        model.loss_backward(cache)
        if first is None:
            first = (float(loss), backend.asnumpy(flat.grads).copy())
        adam.step(1e-3)
    return first[0], first[1], backend.asnumpy(flat.params).copy()


def fingerprints() -> dict:
    from scratchformer import backend
    from scratchformer.decode import beam_search, greedy_decode
    from scratchformer.models import LanguageModel, Transformer

    out = {}
    V = 13
    for dtype in ("float32", "float64"):
        with backend.precision(dtype):
            for name, over in VARIANTS.items():
                r = np.random.default_rng(0)
                src, tgt_in, tgt_out = _batch(r, V)
                model = Transformer(_config(V, **over))
                loss, grads, params = _train(model, (src, tgt_in), tgt_out)
                key = f"{name}/{dtype}"
                out[f"{key}/loss"] = np.array(loss)
                out[f"{key}/grads"] = grads
                out[f"{key}/params-after-2-steps"] = params
                greedy = greedy_decode(model, src, max_len_b=5)
                beams = beam_search(model, src, beam_size=3, max_len_b=5, nbest=2)
                out[f"{key}/greedy"] = _ragged([t for t in greedy])
                out[f"{key}/beam"] = _ragged([h.tokens for hs in beams for h in hs])
                out[f"{key}/beam-scores"] = np.array([h.score for hs in beams for h in hs])
            for name, over in LM_VARIANTS.items():
                r = np.random.default_rng(1)
                ids = r.integers(3, V, (3, 8))
                ids[-1, -2:] = 0
                targets = np.concatenate([ids[:, 1:], np.zeros((3, 1), dtype=ids.dtype)], 1)
                model = LanguageModel(_config(V, **over))
                loss, grads, params = _train(model, (ids,), targets)
                key = f"{name}/{dtype}"
                out[f"{key}/loss"] = np.array(loss)
                out[f"{key}/grads"] = grads
                out[f"{key}/params-after-2-steps"] = params
    return out


def _ragged(rows) -> np.ndarray:
    """Token lists as one int array: each row's length, then the tokens."""
    flat = []
    for row in rows:
        flat += [len(row), *row]
    return np.array(flat, dtype=np.int64)


def relative_error(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    return diff / scale if scale > 0 else diff


def compare(before: str, after: str) -> int:
    a, b = np.load(before), np.load(after)
    keys = sorted(set(a.files) | set(b.files))
    worst = 0.0
    print(f"{'variant':<12} {'dtype':<8} {'quantity':<22} {'result'}")
    for key in keys:
        variant, dtype, what = key.split("/")
        if key not in a.files or key not in b.files:
            print(f"{variant:<12} {dtype:<8} {what:<22} missing on one side")
            worst = float("inf")
            continue
        x, y = a[key], b[key]
        if x.shape == y.shape and np.array_equal(x, y):
            result = "bitwise"
        else:
            err = relative_error(y, x)
            worst = max(worst, err)
            result = f"{err:.2e}"
        print(f"{variant:<12} {dtype:<8} {what:<22} {result}")
    print(f"largest relative error: {worst:.2e}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--save", help="write the fingerprints to this .npz")
    p.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = p.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.save:
        p.error("give --save FILE or --compare BEFORE AFTER")
    np.savez(args.save, **fingerprints())
    print(f"wrote {args.save}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
