"""An exported model against a decoder nobody here wrote: ``transformers``' ``generate``.

    python benchmarks/hf_parity.py runs/bible-cpu/checkpoints/final.npz data/bible/test.tsv

Exports the checkpoint (``scratchformer.app.export``) to a temporary folder, loads it with
``MarianMTModel.from_pretrained`` and ``AutoTokenizer.from_pretrained``, and compares on
every source sentence of the TSV (``--limit`` for fewer):

1. **tokens**: the exported tokenizer's ids against ours (SentencePiece);
2. **logits**: teacher-forced on our greedy output, ``max|ours - theirs| / max|ours|``
   (the harness metric) and the largest absolute difference;
3. **greedy**: ``generate(num_beams=1)`` token for token against our greedy search (the
   rules of ``translate``: <eos> not first, <pad>/<bos> never, lengths ``S + 50``).
   Where they part, the first differing step is a tie when the two tokens' logits differ
   by less than twice the largest difference between the two models' logits there (the
   other model's rounding could order them either way); ties are listed;
4. **beam 4 at alpha 0**: the one length penalty both can set alike (none: both rank by
   log P); ``early_stopping=True`` in ``generate``;
5. **text**: ``transformers``' translation pipeline with ``num_beams=1`` (4.x, whose
   pipeline asks for 4 beams unless told; 5.x removed the pipeline: there the tokenizer,
   ``generate`` and ``batch_decode``) against our ``translate(search="greedy")``, from the
   text to the text; sentences of one source length go together, each group with our
   length limit as ``max_new_tokens``.

Needs ``pip install -e '.[export,hf]'`` (transformers, torch, safetensors). Prints a
report; ``--json`` writes it too. Threads: one for both (``--threads``).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from threadpoolctl import threadpool_limits
from transformers import AutoTokenizer, MarianMTModel

from scratchformer.app.checkpoint import load_with_tokenizer
from scratchformer.app.export import export_marian
from scratchformer.app.translate import translate
from scratchformer.engine.decode import beam_search, greedy_decode
from scratchformer.engine.decode.common import max_output_lengths, writing_tokens


def read_sources(tsv: Path, limit: int | None) -> list[str]:
    rows = [line.split("\t")[0] for line in tsv.read_text(encoding="utf-8").splitlines() if line]
    return rows[:limit] if limit else rows


def padded(rows: list[list[int]], pad: int):
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), pad, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def their_generate(hf, rows, limits, cfg, beams=1, **kw) -> list[list[int]]:
    """``generate`` (greedy, or beam search with ``beams`` > 1) on a right-padded batch;
    each output cut as ours is: without <bos>, ended at <eos>, at most its own ``L_i``
    tokens (ours forces <eos> there)."""
    src = torch.from_numpy(padded(rows, cfg.pad_id))
    with torch.no_grad():
        out = hf.generate(
            src,
            attention_mask=(src != cfg.pad_id).long(),
            max_length=int(max(limits)) + 2,
            num_beams=beams,
            **kw,
        )
    result = []
    for seq, L in zip(out.tolist(), limits):
        seq = seq[1:]
        if cfg.eos_id in seq:
            seq = seq[: seq.index(cfg.eos_id)]
        result.append([t for t in seq if t != cfg.pad_id][: int(L)])
    return result


def logits_pair(model, hf, ids, out, cfg):
    """Teacher-forced logits of both models for source ``ids`` and output ``out``
    (<bos> + out + <eos> fed): (T, V) each, float32."""
    tgt = np.array([[cfg.bos_id, *out]], dtype=np.int64)
    ours = np.asarray(model.forward(np.array([ids]), tgt)[0][0], dtype=np.float32)
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor([ids]), decoder_input_ids=torch.from_numpy(tgt)).logits
    return ours, theirs[0].numpy()


def tie_or_not(model, hf, ids, a, b, cfg) -> dict:
    """Where greedy outputs ``a`` (ours) and ``b`` (theirs) part: the step, both tokens,
    their logit gap in our model, and the models' largest logit difference there."""
    n = min(len(a), len(b))
    k = next((i for i in range(n) if a[i] != b[i]), n)  # n: one ended where the other goes on
    ours, theirs = logits_pair(model, hf, ids, a[:k], cfg)
    x, y = ours[k], theirs[k]
    ta = a[k] if k < len(a) else cfg.eos_id
    tb = b[k] if k < len(b) else cfg.eos_id
    gap = float(abs(x[ta] - x[tb]))
    diff = float(np.abs(x - y).max())
    return {
        "step": k,
        "ours": int(ta),
        "theirs": int(tb),
        "gap": gap,
        "logit_diff": diff,
        "tie": gap < 2 * diff,
    }


def their_text(hf, their_tok, sources, limits, batch: int) -> tuple[list, str]:
    """``transformers``' translations of ``sources`` from their text: its translation
    pipeline (4.x), else its tokenizer, ``generate`` and ``batch_decode`` (5.x). Our length
    rule is per sentence (``L_i = S_i + 50``) and ``generate`` takes one per call, so the
    sentences go in groups of one source length, each with its ``max_new_tokens``."""
    groups: dict = {}
    for i, L in enumerate(limits):
        groups.setdefault(int(L), []).append(i)
    out = [None] * len(sources)
    pipe = None
    if hasattr(transformers, "TranslationPipeline"):
        pipe = transformers.pipeline("translation", model=hf, tokenizer=their_tok)
    for L, members in groups.items():
        for lo in range(0, len(members), batch):
            idx = members[lo : lo + batch]
            texts = [sources[i] for i in idx]
            if pipe is not None:  # 4.x's pipeline asks for 4 beams unless told
                found = pipe(texts, batch_size=batch, num_beams=1, max_new_tokens=L + 1)
                found = [r["translation_text"] for r in found]
            else:
                enc = their_tok(texts, return_tensors="pt", padding=True)
                with torch.no_grad():
                    generated = hf.generate(**enc, max_new_tokens=L + 1)
                found = their_tok.batch_decode(generated, skip_special_tokens=True)
            for i, text in zip(idx, found):
                out[i] = text
    how = (
        "pipeline('translation', num_beams=1)"
        if pipe is not None
        else ("tokenizer + generate + batch_decode (transformers 5 has no translation pipeline)")
    )
    return out, how


def compare(args) -> dict:
    ckpt, tok = load_with_tokenizer(args.checkpoint)
    model, cfg = ckpt.model, ckpt.model.config
    folder = Path(tempfile.mkdtemp(prefix="scratchformer-hf-"))
    export_marian(args.checkpoint, folder, overwrite=True)
    hf = MarianMTModel.from_pretrained(folder).eval()
    their_tok = AutoTokenizer.from_pretrained(folder)
    sources = read_sources(args.test, args.limit)
    report = {
        "checkpoint": str(args.checkpoint),
        "sentences": len(sources),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
    }

    ids = [tok.encode(s) for s in sources]
    report["token_mismatches"] = [
        i for i, s in enumerate(sources) if their_tok(s)["input_ids"] != ids[i]
    ]

    writes = writing_tokens(tok, cfg.vocab_size)
    limits = max_output_lengths([len(r) for r in ids], 1.0, 50, cfg.max_len)
    ours, theirs, t0 = [], [], time.perf_counter()
    for lo in range(0, len(ids), args.batch):
        rows = ids[lo : lo + args.batch]
        ours += greedy_decode(model, padded(rows, cfg.pad_id), writes=writes, min_len=1)
        theirs += their_generate(hf, rows, limits[lo : lo + args.batch], cfg)
    report["greedy_seconds_both"] = round(time.perf_counter() - t0, 1)
    parted = [i for i in range(len(ids)) if ours[i] != theirs[i]]
    report["greedy_identical"] = len(ids) - len(parted)
    report["greedy_parted"] = [
        {"sentence": i, **tie_or_not(model, hf, ids[i], ours[i], theirs[i], cfg)} for i in parted
    ]

    worst_abs, worst_rel = 0.0, 0.0
    for i in range(len(ids)):
        a, b = logits_pair(model, hf, ids[i], ours[i], cfg)
        worst_abs = max(worst_abs, float(np.abs(a - b).max()))
        worst_rel = max(worst_rel, float(np.abs(a - b).max() / np.abs(a).max()))
    report["logits_max_abs_diff"] = worst_abs
    report["logits_max_rel_diff"] = worst_rel

    n = min(len(ids), args.beam_sentences)
    ours_b, theirs_b = [], []
    for lo in range(0, n, args.batch):
        rows = ids[lo : min(lo + args.batch, n)]
        found = beam_search(model, padded(rows, cfg.pad_id), writes=writes, alpha=0.0, min_len=1)
        ours_b += [h[0].tokens for h in found]
        theirs_b += their_generate(
            hf,
            rows,
            limits[lo : lo + len(rows)],
            cfg,
            beams=4,
            length_penalty=0.0,
            early_stopping=True,
        )
    report["beam4_alpha0_sentences"] = n
    report["beam4_alpha0_identical"] = sum(a == b for a, b in zip(ours_b, theirs_b))

    text_ours = translate(model, tok, sources, search="greedy", batch_size=args.batch)
    text_theirs, report["text_by"] = their_text(hf, their_tok, sources, limits, args.batch)
    report["text_identical"] = sum(a == b for a, b in zip(text_ours, text_theirs))
    report["text_parted"] = [
        {"sentence": i, "ours": a, "theirs": b}
        for i, (a, b) in enumerate(zip(text_ours, text_theirs))
        if a != b
    ][:20]
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("checkpoint", type=Path)
    p.add_argument("test", type=Path, help="a TSV whose first column is the source")
    p.add_argument("--limit", type=int, default=None, help="the first N sentences only")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--beam-sentences", type=int, default=200, help="sentences for beam 4")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    with threadpool_limits(args.threads):
        report = compare(args)
    text = json.dumps(report, indent=2, ensure_ascii=False)
    print(text)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    ties = sum(r["tie"] for r in report["greedy_parted"])
    print(
        f"\ngreedy: {report['greedy_identical']} of {report['sentences']} identical, "
        f"{len(report['greedy_parted'])} parted ({ties} at a tie); logits max|a-b|/max|a| "
        f"{report['logits_max_rel_diff']:.2e} (max abs {report['logits_max_abs_diff']:.2e}); "
        f"beam 4 alpha 0: {report['beam4_alpha0_identical']} of "
        f"{report['beam4_alpha0_sentences']}; "
        f"text: {report['text_identical']} of {report['sentences']} ({report['text_by']}); "
        f"tokens: {len(report['token_mismatches'])} mismatches",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
