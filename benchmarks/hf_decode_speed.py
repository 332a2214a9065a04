"""Decoding speed against the peers that decode translation models on a CPU: CTranslate2
(the inference engine OpenNMT and OPUS-MT deployments run on) and ``transformers``'
``generate``, on the same weights (our export), the same sentences, the same threads.

    python benchmarks/hf_decode_speed.py runs/bible-2core/checkpoints/final.npz data/bible/test.tsv
    python benchmarks/hf_decode_speed.py CKPT TSV --threads 1 2 --peers ct2 ct2-int8 generate
    PYTHONPATH=<older tree> python benchmarks/hf_decode_speed.py ...   # ours as it was

Rows: greedy and beam 4, each one sentence at a time (``--single`` sentences) and in
batches of ``--batch`` (``--batched`` sentences, file order, right-padded), at each of
``--threads``. Every decoder does the same search: our token rules (<eos> not first,
<pad>/<bos> never emitted, at most ``L_i = S_i + 50`` tokens: a peer's output is cut at
its own ``L_i``, the length rule matched); beam search ranks by plain log P on every side
(our alpha 0, CTranslate2's ``length_penalty=0``, generate's ``length_penalty=0`` with
``early_stopping=True``). A warm-up batch runs first; each row is timed ``--rounds``
times, the decoders alternating, and the median is reported with the spread (min-max).
Throughput: sentences/s and target tokens/s (each output's tokens + its <eos>, counted on
ours for every decoder). Agreement: how many outputs of each peer equal ours token for
token. CTranslate2's int8 row (``ct2-int8``: what CPU deployments use) is for
information, not a target. ``--profile``: where our time goes in the batched rows.

CTranslate2 reads our exports through ``benchmarks/ct2_loader.py`` (its Marian loader,
with the decoder started from <bos> and every vocabulary row kept). A benchmark, never a
test. Needs ``pip install -e '.[export,hf]' ctranslate2``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
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
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).parent))
import layout  # noqa: E402  (the package as it is, or a tree of before: PYTHONPATH)

load_with_tokenizer = layout.app("checkpoint").load_with_tokenizer
export_marian = layout.app("export").export_marian
beam_search = layout.engine("decode").beam_search
greedy_decode = layout.engine("decode").greedy_decode
max_output_lengths = layout.engine("decode.common").max_output_lengths
writing_tokens = layout.engine("decode.common").writing_tokens

PEERS = ("ct2", "ct2-int8", "generate")


# read_sources and padded as in hf_parity.py, which cannot be imported here: it loads torch
# and the present layout at import, and this script also measures older trees
def read_sources(tsv: Path, limit: int | None) -> list[str]:
    rows = [line.split("\t")[0] for line in tsv.read_text(encoding="utf-8").splitlines() if line]
    return rows[:limit] if limit else rows


def padded(rows: list[list[int]], pad: int):
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def cut(seq, cfg, L) -> list[int]:
    """An output as ours is: ended at <eos>, no <pad>, at most ``L`` tokens."""
    if cfg.eos_id in seq:
        seq = seq[: seq.index(cfg.eos_id)]
    return [t for t in seq if t != cfg.pad_id][: int(L)]


# -- the decoders: each takes batches of source ids and gives output ids --------------------
def ours(model, batches, beams: int, writes, limits) -> list:
    out = []
    for rows in batches:
        src = padded(rows, model.config.pad_id)
        if beams == 1:
            out += greedy_decode(model, src, writes=writes, min_len=1)
        else:
            found = beam_search(model, src, writes=writes, beam_size=beams, alpha=0.0, min_len=1)
            out += [h[0].tokens for h in found]
    return out


class CT2:
    """CTranslate2's Translator on the converted export, fed our tokens as strings."""

    def __init__(self, export: Path, cfg, threads: int, quantization=None):
        import ctranslate2
        from ct2_loader import convert

        folder = Path(tempfile.mkdtemp(prefix="scratchformer-ct2-"))
        convert(str(export), str(folder), quantization)
        self.vocab = json.loads((folder / "shared_vocabulary.json").read_text(encoding="utf-8"))
        self.ids = {t: i for i, t in enumerate(self.vocab)}
        self.cfg = cfg
        self.translator = ctranslate2.Translator(str(folder), intra_threads=threads,
                                                 compute_type=quantization or "float32")
        self.banned = [[self.vocab[cfg.pad_id]], [self.vocab[cfg.bos_id]]]

    def __call__(self, batches, beams: int, limits) -> list:
        out, lo = [], 0
        for rows in batches:
            L = limits[lo : lo + len(rows)]
            res = self.translator.translate_batch(
                [[self.vocab[i] for i in r] for r in rows], beam_size=beams,
                max_decoding_length=int(max(L)) + 1, min_decoding_length=1, length_penalty=0.0,
                suppress_sequences=self.banned, max_batch_size=len(rows),
            )
            out += [cut([self.ids[t] for t in r.hypotheses[0]], self.cfg, n)
                    for r, n in zip(res, L)]
            lo += len(rows)
        return out


class Generate:
    """``transformers``' ``generate`` on the export (our rules in its generation_config)."""

    def __init__(self, export: Path, cfg, threads: int):
        import torch
        from transformers import MarianMTModel

        self.torch, self.cfg, self.threads = torch, cfg, threads
        self.hf = MarianMTModel.from_pretrained(export).eval()

    def __call__(self, batches, beams: int, limits) -> list:
        torch, cfg = self.torch, self.cfg
        torch.set_num_threads(self.threads)
        out, lo = [], 0
        kw = {"length_penalty": 0.0, "early_stopping": True} if beams > 1 else {}
        for rows in batches:
            L = limits[lo : lo + len(rows)]
            src = torch.from_numpy(padded(rows, cfg.pad_id))
            with torch.no_grad():
                seqs = self.hf.generate(src, attention_mask=(src != cfg.pad_id).long(),
                                        max_length=int(max(L)) + 2, num_beams=beams, **kw)
            out += [cut(s[1:], cfg, n) for s, n in zip(seqs.tolist(), L)]
            lo += len(rows)
        return out


# -- the table -------------------------------------------------------------------------------
def row(name, model, peers, ids, batch, beams, writes, rounds) -> dict:
    cfg = model.config
    batches = [ids[i : i + batch] for i in range(0, len(ids), batch)]
    limits = max_output_lengths([len(r) for r in ids], 1.0, 50, cfg.max_len)
    times: dict = {"ours": [], **{p: [] for p in peers}}
    outs: dict = {}
    for _ in range(rounds):
        t0 = time.perf_counter()
        outs["ours"] = ours(model, batches, beams, writes, limits)
        times["ours"].append(time.perf_counter() - t0)
        for p, decode in peers.items():
            t0 = time.perf_counter()
            outs[p] = decode(batches, beams, limits)
            times[p].append(time.perf_counter() - t0)
    tokens = sum(len(x) + 1 for x in outs["ours"])
    med = {k: statistics.median(v) for k, v in times.items()}
    r = {"row": name, "sentences": len(ids), "target_tokens": tokens,
         "seconds": {k: [round(t, 4) for t in v] for k, v in times.items()},
         "sent_per_s": {k: len(ids) / m for k, m in med.items()},
         "tok_per_s": {k: tokens / m for k, m in med.items()}}
    for p in peers:
        r[f"ours/{p}"] = med[p] / med["ours"]
        r[f"ours/{p}_spread"] = [min(times[p]) / max(times["ours"]),
                                 max(times[p]) / min(times["ours"])]
        r[f"agree_{p}"] = sum(x == y for x, y in zip(outs["ours"], outs[p]))
    return r


def show(r, peers) -> str:
    parts = [f"{r['row']:<28} {r['sentences']:>4} sent  ours {r['sent_per_s']['ours']:7.2f} sent/s "
             f"{r['tok_per_s']['ours']:8.1f} tok/s"]
    for p in peers:
        lo, hi = r[f"ours/{p}_spread"]
        parts.append(f"{p} {r['sent_per_s'][p]:7.2f} sent/s, ours/{p} {r[f'ours/{p}']:.2f}x "
                     f"({lo:.2f}-{hi:.2f}), agree {r[f'agree_{p}']}/{r['sentences']}")
    return " | ".join(parts)


def profile(model, ids, batch, beams, writes, top: int = 12) -> str:
    """Our decoding of a row under cProfile: the functions holding the time."""
    batches = [ids[i : i + batch] for i in range(0, len(ids), batch)]
    limits = max_output_lengths([len(r) for r in ids], 1.0, 50, model.config.max_len)
    prof = cProfile.Profile()
    prof.enable()
    ours(model, batches, beams, writes, limits)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path)
    p.add_argument("test", type=Path, help="a TSV whose first column is the source")
    p.add_argument("--single", type=int, default=32, help="sentences decoded one at a time")
    p.add_argument("--batched", type=int, default=256, help="sentences decoded in batches")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--peers", nargs="*", default=["ct2", "ct2-int8", "generate"], choices=PEERS)
    p.add_argument("--profile", action="store_true", help="also profile our batched rows")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)

    ckpt, tok = load_with_tokenizer(args.checkpoint)
    model, cfg = ckpt.model, ckpt.model.config
    export = Path(tempfile.mkdtemp(prefix="scratchformer-export-")) / "model"
    export_marian(args.checkpoint, export, overwrite=True)
    sources = read_sources(args.test, max(args.single, args.batched))
    ids = [tok.encode(s) for s in sources]
    writes = writing_tokens(tok, cfg.vocab_size)
    package = str(Path(sys.modules["scratchformer"].__file__).parent)
    report = {"machine": f"{platform.machine()} {os.cpu_count()} cpus, {platform.processor()}",
              "numpy": np.__version__, "checkpoint": str(args.checkpoint), "package": package,
              "rows": []}
    print(f"ours: the package in {package}; {report['machine']}, NumPy {np.__version__}")
    for threads in args.threads:
        peers = {}
        for name in args.peers:
            if name == "generate":
                peers[name] = Generate(export, cfg, threads)
            else:
                peers[name] = CT2(export, cfg, threads, "int8" if name == "ct2-int8" else None)
        with threadpool_limits(threads):
            warm = ids[: args.batch]
            ours(model, [warm], 1, writes, [60] * len(warm))
            for decode in peers.values():
                decode([warm], 1, [60] * len(warm))
            for beams in (1, 4):
                search = "greedy" if beams == 1 else "beam 4"
                for label, n, batch in (("batch 1", args.single, 1),
                                        (f"batch {args.batch}", args.batched, args.batch)):
                    name = f"{search}, {label}, {threads} thr"
                    r = row(name, model, peers, ids[:n], batch, beams, writes, args.rounds)
                    r["threads"] = threads
                    report["rows"].append(r)
                    print(show(r, peers), flush=True)
            if args.profile:
                for beams in (1, 4):
                    key = f"profile_beams_{beams}_threads_{threads}"
                    report[key] = text = profile(model, ids[: args.batched], args.batch, beams,
                                                 writes)
                    print(text)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
