"""Decoding speed: the key/value cache versus recomputing the whole prefix every step.

    python benchmarks/decode_speed.py                 # small preset, 50-token outputs
    python benchmarks/decode_speed.py --batch 16 --vocab 16000 --repeats 5

Greedy decoding of a batch of random source sentences with a randomly initialised
``small`` model (N=3, d_model=256, d_ff=1024, h=4). Every output is exactly
``--out-len`` tokens (min_len = max length), so all methods do the same number of steps:

    cached      ``greedy_decode``: encoder once, one new position per step (kv cache)
    recompute   encoder once, then at step t the decoder runs over all t+1 prefix
                positions from an empty kv (the same lean inference code, no cache)
    forward     the training ``model.forward`` over source and prefix at every step
                (what a decoder without any incremental path does; builds backward caches)

Also reported: beam search (beam 4) with the cache, per sentence. All methods must
produce the same tokens (checked). Prints ms per sentence and the speed-up ratios.
This is a benchmark, not a test: no timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import platform
import time

import layout  # the engine in either layout (run on two trees: PYTHONPATH)

backend = layout.engine("backend")
beam_search = layout.engine("decode").beam_search
greedy_decode = layout.engine("decode").greedy_decode
Transformer = layout.engine("models").Transformer
TransformerConfig = layout.engine("models").TransformerConfig

xp = backend.xp


def _constrained_argmax(logits, step, out_len, cfg):
    """The token rules of greedy_decode for outputs of exactly ``out_len`` tokens."""
    lg = logits.astype(xp.float64)
    lg[:, [cfg.pad_id, cfg.bos_id]] = -xp.inf
    if step < out_len:
        lg[:, cfg.eos_id] = -xp.inf
    return backend.asnumpy(xp.argmax(lg, axis=-1))


def greedy_recompute(model, src, out_len, use_forward):
    """Greedy decoding that recomputes the whole prefix at every step (no kv reuse)."""
    np, cfg = backend.np, model.config
    B = src.shape[0]
    prefix = np.full((B, 1), cfg.bos_id, dtype=np.int64)
    if not use_forward:
        memory, src_mask = model.encode_infer(src)
    for step in range(out_len + 1):
        ids = backend.asarray(prefix)
        if use_forward:
            logits = model.forward(src, ids)[0][:, -1]  # encoder and decoder, with caches
        else:
            kv = model.init_kv(memory, src_mask, beams=1, capacity=step + 1)
            logits = model.decode_step(ids, kv)[:, -1]  # the whole prefix, fresh kv
        prefix = np.concatenate(
            [prefix, _constrained_argmax(logits, step, out_len, cfg)[:, None]], 1
        )
    return [row[1:-1].tolist() for row in prefix]  # drop <bos> and the final <eos>


def _time(fn, repeats):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        if backend.backend_name() == "cupy":
            xp.cuda.Device().synchronize()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch", type=int, default=8, help="sentences decoded together")
    p.add_argument("--src-len", type=int, default=25)
    p.add_argument("--out-len", type=int, default=50, help="output tokens per sentence")
    p.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    p.add_argument("--backend", default="numpy", choices=["numpy", "cupy"])
    p.add_argument("--skip-forward", action="store_true", help="skip the slowest baseline")
    args = p.parse_args(argv)
    backend.set_backend(args.backend)

    cfg = TransformerConfig.preset(args.preset, vocab_size=args.vocab)
    model = Transformer(cfg)
    rng = backend.host_rng(0)
    src = backend.asarray(rng.integers(3, args.vocab, (args.batch, args.src_len)))
    n, L = args.batch, args.out_len
    fixed = dict(max_len_a=0.0, max_len_b=L, min_len=L)  # exactly L tokens + <eos>

    print(
        f"decode speed: preset={args.preset} (N={cfg.N}, d_model={cfg.d_model}, "
        f"h={cfg.h}, d_ff={cfg.d_ff}), V={args.vocab}, batch={n}, source {args.src_len} "
        f"tokens, output {L} tokens, {backend.np.dtype(backend.get_dtype()).name}, "
        f"backend={args.backend}, {platform.processor() or platform.machine()}, "
        f"best of {args.repeats}"
    )
    t_cached, out_cached = _time(lambda: greedy_decode(model, src, **fixed), args.repeats)
    t_recomp, out_recomp = _time(
        lambda: greedy_recompute(model, src, L, use_forward=False), args.repeats
    )
    assert out_cached == out_recomp, "cached and recomputed decoding disagree"
    assert all(len(o) == L for o in out_cached)
    rows = [("greedy, kv cache", t_cached), ("greedy, recompute prefix", t_recomp)]
    if not args.skip_forward:
        t_fwd, out_fwd = _time(lambda: greedy_recompute(model, src, L, use_forward=True), 1)
        assert out_fwd == out_cached, "training forward and cached decoding disagree"
        rows.append(("greedy, training forward", t_fwd))
    t_beam, _ = _time(lambda: beam_search(model, src, beam_size=4, **fixed), args.repeats)
    rows.append(("beam 4, kv cache", t_beam))

    for name, t in rows:
        print(f"  {name:<26} {1000 * t / n:9.1f} ms/sentence  ({t:.3f} s for {n})")
    print(f"  speed-up of the cache over recomputing the prefix: {t_recomp / t_cached:.1f}x")
    if not args.skip_forward:
        print(f"  speed-up of the cache over the training forward:   {t_fwd / t_cached:.1f}x")


if __name__ == "__main__":
    main()
