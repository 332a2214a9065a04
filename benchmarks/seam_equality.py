"""Fingerprints of the engine's numbers on fixed inputs, to show that a change of the code
moves none of them: losses, every parameter's gradient, the parameters after two Adam
steps, and greedy and beam-search outputs, for every attention variant, the language
model (with its sampled continuations) and the classifier, in float32, float64 and
float16 (mixed precision as training runs it: float32 master weights, the activations in
float16, emulated on NumPy, with dynamic loss scaling).

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
    classifier   the encoder classifier

The script imports the engine by the module names of either layout (``scratchformer.X``
or ``scratchformer.engine.X``), so the same file runs on the trees before and after a
reorganisation.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402


def _imp(name: str):
    """The engine's module ``name`` ("optim.scaler") in either layout."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import layout

    return layout.engine(name)


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
}
LM_VARIANTS = {
    "lm-dense": {},
    "lm-skew": {"attention": "relative_skew", "max_relative_position": 2},
    "lm-local": {"attention": "local", "local_block": 3},
}


def _config(V, **over):
    TransformerConfig = _imp("models").TransformerConfig

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


def _train(model, inputs, targets, steps=2, compute=None):
    """The loss and gradients of the first step, the parameters after ``steps`` steps;
    ``compute="float16"``: mixed precision with dynamic loss scaling, as the Stepper runs
    it (scaled backward, unscale, clip, skip on overflow), over three steps."""
    backend, device = _imp("backend"), _imp("device")
    Adam, clip_grad_norm = _imp("optim").Adam, _imp("optim").clip_grad_norm
    scaler = _imp("optim.scaler").LossScaler(2.0**15, 2) if compute else None
    flat = model.flatten()
    adam = Adam(flat)
    first = None
    for step in range(steps if compute is None else 3):
        flat.grads.fill(0)
        with backend.autocast(compute):
            loss, cache = model.loss_forward(*inputs, targets, rng=device.generator(100 + step))
            model.loss_backward(cache, dloss=1.0 if scaler is None else scaler.scale)
        if scaler is not None:
            scaler.unscale(flat.grads)
        if first is None:
            first = (float(loss), backend.asnumpy(flat.grads).copy())
        if scaler is None:
            adam.step(1e-3)
            continue
        ok = scaler.check(clip_grad_norm(flat.grads, 1.0), flat.grads)
        adam.step(1e-3, apply=ok)
        scaler.update(ok)
    return first[0], first[1], backend.asnumpy(flat.params).copy()


def fingerprints() -> dict:
    backend, decode, models = _imp("backend"), _imp("decode"), _imp("models")
    generate = _imp("decode.sample").generate
    out = {}
    V = 13
    for dtype in ("float32", "float64", "float16"):
        compute = "float16" if dtype == "float16" else None
        with backend.precision("float32" if compute else dtype):
            for name, over in VARIANTS.items():
                r = np.random.default_rng(0)
                src, tgt_in, tgt_out = _batch(r, V)
                model = models.Transformer(_config(V, **over))
                loss, grads, params = _train(model, (src, tgt_in), tgt_out, compute=compute)
                key = f"{name}/{dtype}"
                out[f"{key}/loss"] = np.array(loss)
                out[f"{key}/grads"] = grads
                out[f"{key}/params-after-2-steps"] = params
                with backend.autocast(compute):
                    greedy, beams = _decode(decode, model, src)
                out[f"{key}/greedy"] = _ragged([t for t in greedy])
                out[f"{key}/beam"] = _ragged([h.tokens for hs in beams for h in hs])
                out[f"{key}/beam-scores"] = np.array([h.score for hs in beams for h in hs])
            for name, over in LM_VARIANTS.items():
                r = np.random.default_rng(1)
                ids = r.integers(3, V, (3, 8))
                ids[-1, -2:] = 0
                targets = np.concatenate([ids[:, 1:], np.zeros((3, 1), dtype=ids.dtype)], 1)
                model = models.LanguageModel(_config(V, **over))
                loss, grads, params = _train(model, (ids,), targets, compute=compute)
                key = f"{name}/{dtype}"
                out[f"{key}/loss"] = np.array(loss)
                out[f"{key}/grads"] = grads
                out[f"{key}/params-after-2-steps"] = params
                with backend.autocast(compute):
                    samples = generate(model, [1, 5, 6], max_new_tokens=6, temperature=1.0,
                                       top_k=5, seed=3, num_samples=3)
                    greedy = generate(model, [1, 5, 6], max_new_tokens=6, temperature=0.0)
                out[f"{key}/samples"] = _ragged(samples)
                out[f"{key}/greedy"] = _ragged(greedy)
            r = np.random.default_rng(2)
            ids = r.integers(3, V, (4, 7))
            ids[:, 0] = 1
            ids[-1, -3:] = 0
            labels = r.integers(0, 3, (4,))
            model = models.EncoderClassifier(_config(V), num_classes=3)
            loss, grads, params = _train(model, (ids,), labels, compute=compute)
            key = f"classifier/{dtype}"
            out[f"{key}/loss"] = np.array(loss)
            out[f"{key}/grads"] = grads
            out[f"{key}/params-after-2-steps"] = params
            with backend.autocast(compute):
                out[f"{key}/predict"] = backend.asnumpy(model.predict(ids)).astype(np.int64)
    return out


def _decode(decode, model, src):
    """Greedy, and beam 3 with its 2 best, up to 5 tokens past the source: through the
    options object where the tree has one, else its keywords."""
    if hasattr(decode, "DecodeOptions"):
        O = decode.DecodeOptions
        greedy = decode.greedy_decode(model, src, O(search="greedy", max_len_b=5))
        return greedy, decode.beam_search(model, src, O(beam_size=3, max_len_b=5, nbest=2))
    greedy = decode.greedy_decode(model, src, max_len_b=5)
    return greedy, decode.beam_search(model, src, beam_size=3, max_len_b=5, nbest=2)


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
