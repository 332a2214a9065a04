"""The beam-4 alpha-0 outputs that differ between ours and generate, among the first 256
test sentences: each output's log P under our model.

    python benchmarks/results/2026-11-27/export/beam_difference.py CHECKPOINT TEST.tsv
"""

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # benchmarks/
from hf_parity import padded, read_sources, their_generate
from transformers import MarianMTModel

from scratchformer import DecodeOptions, beam_search, load_with_tokenizer
from scratchformer.app.export import export_marian
from scratchformer.engine.decode.common import max_output_lengths, writing_tokens

torch.set_num_threads(1)
ck, tok = load_with_tokenizer(sys.argv[1])
model, cfg = ck.model, ck.model.config
folder = Path(tempfile.mkdtemp())
export_marian(sys.argv[1], folder, overwrite=True)
hf = MarianMTModel.from_pretrained(folder).eval()
srcs = read_sources(Path(sys.argv[2]), 256)
ids = [tok.encode(s) for s in srcs]
writes = writing_tokens(tok, cfg.vocab_size)
limits = max_output_lengths([len(r) for r in ids], 1.0, 50, cfg.max_len)


def logp(i, out):
    tgt = np.array([[cfg.bos_id, *out]])
    z = np.asarray(model.forward(np.array([ids[i]]), tgt)[0][0], dtype=np.float64)
    lp = z - z.max(-1, keepdims=True)
    lp -= np.log(np.exp(lp).sum(-1, keepdims=True))
    return float(sum(lp[t, y] for t, y in enumerate([*out, cfg.eos_id])))


for lo in range(0, 256, 32):
    rows = ids[lo : lo + 32]
    options = DecodeOptions(beam_size=4, alpha=0.0, max_len_a=1.0, max_len_b=50, min_len=1)
    a = [h[0].tokens for h in beam_search(model, padded(rows, 0), options, writes)]
    b = their_generate(
        hf, rows, limits[lo : lo + 32], cfg, beams=4, length_penalty=0.0, early_stopping=True
    )
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            i = lo + k
            print(
                f"sentence {i}: ours {len(x)} tokens log P {logp(i, x):.4f}; "
                f"generate {len(y)} tokens log P {logp(i, y):.4f}"
            )
            print("  ours:", tok.decode(x))
            print("  theirs:", tok.decode(y))
