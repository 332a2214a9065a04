"""``scratchformer gradcheck``: prove every parameter's gradient of a small model.

By default: a 2-layer ``tiny`` encoder-decoder, post-LN and pre-LN, tied embeddings,
padding in source and target (B=3, S=6, T=5, d_k=8, h=2), label smoothing 0.1 and
dropout 0.1 with its masks replayed; every parameter, large ones on a seeded sample.
"""

from __future__ import annotations

import time

from scratchformer import backend
from scratchformer.gradcheck import DEFAULT_TOL, check_model
from scratchformer.models import PRESETS, Transformer, TransformerConfig


def demo_batch(vocab_size: int, seed: int = 0):
    """A padded batch with S != T and every row a different length.

    Returns host arrays src (3, 6), tgt_in (3, 5), tgt_out (3, 5); pad 0, bos 1, eos 2.
    """
    np = backend.np
    rng = np.random.default_rng(seed)
    src_lens, tgt_lens = [6, 4, 2], [4, 3, 1]  # target content lengths, + eos = T
    src = np.zeros((3, 6), dtype=np.int64)
    tgt_in = np.zeros((3, 5), dtype=np.int64)
    tgt_out = np.zeros((3, 5), dtype=np.int64)
    for b, (ls, lt) in enumerate(zip(src_lens, tgt_lens)):
        src[b, :ls] = rng.integers(3, vocab_size, ls)
        y = rng.integers(3, vocab_size, lt)
        tgt_in[b, : lt + 1] = np.r_[1, y]
        tgt_out[b, : lt + 1] = np.r_[y, 2]
    return src, tgt_in, tgt_out


def add_parser(sub) -> None:
    p = sub.add_parser(
        "gradcheck",
        help="finite-difference check of every parameter of a small model",
        description=__doc__,
    )
    p.add_argument("--preset", default="tiny", choices=sorted(PRESETS))
    p.add_argument("--norm", default="both", choices=["post", "pre", "both"])
    p.add_argument("--positions", default="sinusoidal", choices=["sinusoidal", "learned"])
    p.add_argument("--share-embeddings", default="all", choices=["all", "decoder", "none"])
    p.add_argument("--activation", default="relu", choices=["relu", "gelu"])
    p.add_argument("--layers", type=int, default=2, help="N for encoder and decoder")
    p.add_argument("--vocab", type=int, default=23, help="vocabulary size")
    p.add_argument("--dropout", type=float, default=0.1, help="P_drop (masks are replayed)")
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--tol", type=float, default=DEFAULT_TOL, help="max relative error")
    p.add_argument("--samples", type=int, default=20, help="entries checked per tensor (0 = all)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args) -> int:
    norms = ["post", "pre"] if args.norm == "both" else [args.norm]
    src, tgt_in, tgt_out = (backend.asarray(a) for a in demo_batch(args.vocab, args.seed))
    ok = True
    for norm in norms:
        cfg = TransformerConfig.preset(
            args.preset,
            vocab_size=args.vocab,
            N=args.layers,
            norm=norm,
            positions=args.positions,
            share_embeddings=args.share_embeddings,
            activation=args.activation,
            P_drop=args.dropout,
            eps_ls=args.label_smoothing,
            seed=args.seed,
        )
        model = Transformer(cfg)
        t0 = time.perf_counter()
        report = check_model(
            model,
            src,
            tgt_in,
            tgt_out,
            rng=args.seed + 1,
            max_entries=args.samples or None,
            tol=args.tol,
            seed=args.seed,
        )
        dt = time.perf_counter() - t0
        print(
            f"\n== {args.preset} encoder-decoder, {norm}-LN, N={args.layers}, "
            f"d_model={cfg.d_model}, h={cfg.h}, d_k={cfg.d_k or cfg.d_model // cfg.h}, "
            f"positions={cfg.positions}, share_embeddings={cfg.share_embeddings}, "
            f"P_drop={cfg.P_drop} (replayed), eps_ls={cfg.eps_ls}, "
            f"batch B=3 S=6 T=5 with padding, float64 ({dt:.1f} s)"
        )
        print(report.table())
        ok = ok and report.passed
    print("\ngradcheck:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1
