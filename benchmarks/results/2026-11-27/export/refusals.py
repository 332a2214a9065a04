"""Checkpoints of every configuration export refuses, and `scratchformer export` on each.

python benchmarks/results/2026-11-27/export/refusals.py FOLDER
"""

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "tests"))
from task_data import corpus

from scratchformer import (
    EncoderClassifier,
    LanguageModel,
    Transformer,
    TransformerConfig,
    save_checkpoint,
)
from scratchformer.app.data.bpe import BPETokenizer
from scratchformer.app.data.tokenizers import CharTokenizer
from scratchformer.app.data.vocab import Vocab

here = Path(sys.argv[1])
here.mkdir(parents=True, exist_ok=True)
bpe = BPETokenizer.train([s for p in corpus() for s in p], 350)


def cfg(**kw):
    return TransformerConfig(vocab_size=len(bpe.vocab), N=1, d_model=8, d_ff=16, h=2, **kw)


cases = {
    "pre-ln": Transformer(cfg(norm="pre")),
    "learned-positions": Transformer(cfg(positions="learned")),
    "relative-attention": Transformer(cfg(attention="relative")),
    "local-attention": Transformer(cfg(attention="local", encoder_attention="dense")),
    "d_k-2": Transformer(cfg(d_k=2)),
    "ln_eps-1e-6": Transformer(cfg(ln_eps=1e-6)),
    "language-model": LanguageModel(cfg()),
    "classifier": EncoderClassifier(cfg(), 3),
}
for name, model in cases.items():
    save_checkpoint(here / f"{name}.npz", model, meta={"tokenizer": bpe.to_dict()})
char = CharTokenizer(Vocab(list("abcdefghij")))
save_checkpoint(
    here / "char-tokenizer.npz",
    Transformer(TransformerConfig(vocab_size=len(char.vocab), N=1, d_model=8, d_ff=16, h=2)),
    meta={"tokenizer": char.to_dict()},
)
for f in sorted(here.glob("*.npz")):
    r = subprocess.run(
        ["scratchformer", "export", str(f.name), "-o", "hf-" + f.stem],
        cwd=here,
        capture_output=True,
        text=True,
    )
    print(
        f"$ scratchformer export {f.name} -o hf-{f.stem}   # exit {r.returncode}, "
        f"folder written: {(here / ('hf-' + f.stem)).exists()}"
    )
    print(r.stdout + r.stderr, end="")
