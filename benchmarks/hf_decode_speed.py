"""Decoding speed against a peer: ours against ``transformers``' ``generate`` on the same
weights (the exported model), the same sentences, the same threads, in one run.

    python benchmarks/hf_decode_speed.py runs/bible-cpu/checkpoints/final.npz data/bible/test.tsv

Four rows: greedy and beam 4, each one sentence at a time (``--single`` sentences) and in
batches of ``--batch`` (``--batched`` sentences, file order, right-padded). Both searches
do the same work: our token rules (<eos> not first, <pad>/<bos> never, at most ``S + 50``
tokens) are in the export's generation_config.json; beam search ranks by plain log P on
both sides (alpha 0, ``length_penalty=0``, ``early_stopping=True``: the one length penalty
both can set alike), so that both stop as soon as the best finished hypothesis cannot be
beaten. A warm-up batch runs first; each row is timed ``--rounds`` times, ours and
theirs alternating, and the median is reported with the spread (min-max).
Throughput: sentences/s and target tokens/s (each output's tokens + its <eos>, counted
on our outputs for both: the same sentences and, where they agree, the same tokens).
Also printed: how many outputs agree, and where our time goes (``--profile``).

A benchmark, never a test. Needs ``pip install -e '.[export,hf]'``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from threadpoolctl import threadpool_limits
from transformers import MarianMTModel

from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.export import export_marian
from scratchformer.engine.decode import beam_search, greedy_decode
from scratchformer.engine.decode.common import max_output_lengths, writing_tokens

sys.path.insert(0, str(Path(__file__).parent))
from hf_parity import padded, read_sources, their_generate  # noqa: E402


def ours(model, batches, beams: int, writes) -> list:
    out = []
    for rows in batches:
        src = padded(rows, model.config.pad_id)
        if beams == 1:
            out += greedy_decode(model, src, writes=writes, min_len=1)
        else:
            found = beam_search(model, src, writes=writes, beam_size=beams, alpha=0.0, min_len=1)
            out += [h[0].tokens for h in found]
    return out


def theirs(hf, batches, limits, beams: int, cfg) -> list:
    out, lo = [], 0
    for rows in batches:
        kw = {"length_penalty": 0.0, "early_stopping": True} if beams > 1 else {}
        out += their_generate(hf, rows, limits[lo : lo + len(rows)], cfg, beams=beams, **kw)
        lo += len(rows)
    return out


def timed(fn, *args):
    t0 = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - t0, result


def row(name, model, hf, ids, batch, beams, writes, rounds) -> dict:
    cfg = model.config
    batches = [ids[i : i + batch] for i in range(0, len(ids), batch)]
    limits = max_output_lengths([len(r) for r in ids], 1.0, 50, cfg.max_len)
    t_ours, t_theirs = [], []
    for _ in range(rounds):
        t, a = timed(ours, model, batches, beams, writes)
        t_ours.append(t)
        t, b = timed(theirs, hf, batches, limits, beams, cfg)
        t_theirs.append(t)
    tokens = sum(len(x) + 1 for x in a)
    mo, mt = statistics.median(t_ours), statistics.median(t_theirs)
    return {
        "row": name,
        "sentences": len(ids),
        "target_tokens": tokens,
        "agree": sum(x == y for x, y in zip(a, b)),
        "ours_s": [round(t, 3) for t in t_ours],
        "theirs_s": [round(t, 3) for t in t_theirs],
        "ours_sent_per_s": len(ids) / mo,
        "theirs_sent_per_s": len(ids) / mt,
        "ours_tok_per_s": tokens / mo,
        "theirs_tok_per_s": tokens / mt,
        "ratio": mt / mo,
        "ratio_spread": [min(t_theirs) / max(t_ours), max(t_theirs) / min(t_ours)],
    }


def profile(model, ids, batch, beams, writes, top: int = 12) -> str:
    """Our decoding of the batched row under cProfile: the functions holding the time."""
    batches = [ids[i : i + batch] for i in range(0, len(ids), batch)]
    prof = cProfile.Profile()
    prof.enable()
    ours(model, batches, beams, writes)
    prof.disable()
    out = tempfile.SpooledTemporaryFile(mode="w+")
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    out.seek(0)
    return out.read()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("checkpoint", type=Path)
    p.add_argument("test", type=Path, help="a TSV whose first column is the source")
    p.add_argument("--single", type=int, default=32, help="sentences decoded one at a time")
    p.add_argument("--batched", type=int, default=256, help="sentences decoded in batches")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--profile", action="store_true", help="also profile our batched rows")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)

    torch.set_num_threads(args.threads)
    ckpt, tok = load_with_tokenizer(args.checkpoint)
    model = ckpt.model
    folder = Path(tempfile.mkdtemp(prefix="scratchformer-hf-"))
    export_marian(args.checkpoint, folder, overwrite=True)
    hf = MarianMTModel.from_pretrained(folder).eval()
    sources = read_sources(args.test, max(args.single, args.batched))
    ids = [tok.encode(s) for s in sources]
    writes = writing_tokens(tok, model.config.vocab_size)
    report = {
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "threads": args.threads,
        "numpy": np.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "rows": [],
    }
    with threadpool_limits(args.threads):
        warm = ids[: args.batch]
        ours(model, [warm], 1, writes), theirs(hf, [warm], [60] * len(warm), 1, model.config)
        for beams in (1, 4):
            name = "greedy" if beams == 1 else "beam 4"
            rows = (("batch 1", args.single, 1), (f"batch {args.batch}", args.batched, args.batch))
            for label, n, batch in rows:
                r = row(f"{name}, {label}", model, hf, ids[:n], batch, beams, writes, args.rounds)
                report["rows"].append(r)
                lo, hi = r["ratio_spread"]
                print(
                    f"{r['row']:<18} {r['sentences']:>4} sent  ours {r['ours_sent_per_s']:7.2f} "
                    f"sent/s {r['ours_tok_per_s']:8.1f} tok/s | transformers "
                    f"{r['theirs_sent_per_s']:7.2f} sent/s {r['theirs_tok_per_s']:8.1f} tok/s | "
                    f"ours/theirs {r['ratio']:.2f}x ({lo:.2f}-{hi:.2f}) | "
                    f"agree {r['agree']}/{r['sentences']}",
                    flush=True,
                )
        if args.profile:
            for beams in (1, 4):
                report[f"profile_beams_{beams}"] = text = profile(
                    model, ids[: args.batched], args.batch, beams, writes
                )
                print(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
