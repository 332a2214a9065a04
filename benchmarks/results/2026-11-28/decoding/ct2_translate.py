"""CTranslate2 translating a file with one of our checkpoints, as ``scratchformer
translate`` does: the checkpoint exported (``export_marian``), converted for CTranslate2
(``benchmarks/ct2_loader.py``'s ``convert``: the stock converter for a zero-start model,
the documented loader for a <bos>-start one), the lines encoded and decoded with the
checkpoint's own tokenizer, our token rules (<pad>/<bos> never written, at least one
token, at most min(S + 50, max_len - 1) tokens).

    python ct2_translate.py CKPT INPUT.txt OUTPUT.txt [--beam 4]
    scratchformer translate --checkpoint CKPT --input INPUT.txt --greedy --min-len 1 > ours.txt
    python ct2_translate.py --compare ours.txt OUTPUT.txt

Beam search ranks by plain log P on both sides (``--alpha 0`` for ours, CTranslate2's
``length_penalty=0``): the two length penalties are different formulas.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
import layout  # noqa: E402
from ct2_loader import zero_start  # noqa: E402
from hf_decode_speed import CT2  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("files", nargs="+")
    p.add_argument("--beam", type=int, default=1)
    p.add_argument("--compare", action="store_true")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    if args.compare:
        a, b = (Path(f).read_text(encoding="utf-8").splitlines() for f in args.files)
        same = sum(x == y for x, y in zip(a, b))
        print(f"{same}/{len(a)} lines identical ({len(b)} lines in the second file)")
        return 0 if same == len(a) == len(b) else 1
    ckpt, src, out = args.files
    ck, tok = layout.app("checkpoint").load_with_tokenizer(ckpt)
    cfg = ck.model.config
    export = Path(tempfile.mkdtemp(prefix="scratchformer-export-")) / "model"
    layout.app("export").export_marian(ckpt, export, overwrite=True)
    how = "the stock converter" if zero_start(str(export)) else "benchmarks/ct2_loader.py"
    print(f"CTranslate2 reads the export through {how}", file=sys.stderr)
    ct2 = CT2(export, cfg, args.threads)
    lines = Path(src).read_text(encoding="utf-8").splitlines()
    ids = [tok.encode(line) for line in lines]
    rule = layout.engine("decode.common").max_output_lengths
    limits = [int(n) for n in rule([len(r) for r in ids], 1.0, 50, cfg.max_len)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    batches = [[ids[i] for i in order[lo : lo + 32]] for lo in range(0, len(ids), 32)]
    found = ct2(batches, args.beam, [limits[i] for i in order])
    text = [""] * len(ids)
    for i, toks in zip(order, found):
        text[i] = tok.decode(toks)
    Path(out).write_text("".join(t + "\n" for t in text), encoding="utf-8")
    print(f"{len(ids)} lines translated, beam {args.beam}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
