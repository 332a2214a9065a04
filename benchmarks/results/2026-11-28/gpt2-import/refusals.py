"""The refusals of ``scratchformer import``, one line each: a BERT folder, a Llama folder,
rotary positions (a GPT-J folder, and a GPT-2 config with rope_theta), a folder holding
only pytorch_model.bin, a folder without its tokenizer; and, beside them, GPT-2 options we
lack. Each folder is a copy of a small GPT-2 built here (tests/hf/gpt2_folders.py:
numpy_gpt2, NumPy and safetensors only) with its config.json or files changed.

    python refusals.py TREE WORK > refusals.txt
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

tree, work = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
sys.path.insert(0, str(tree / "tests" / "hf"))
from gpt2_folders import numpy_gpt2  # noqa: E402

work.mkdir(parents=True, exist_ok=True)
base = work / "tiny-gpt2"
if not base.exists():
    numpy_gpt2(base)


def variant(name, config=None, drop=(), rename=None):
    d = work / name
    if d.exists():
        shutil.rmtree(d)
    shutil.copytree(base, d)
    if config is not None:
        c = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**c, **config}))
    for f in drop:
        (d / f).unlink()
    if rename:
        (d / rename[0]).rename(d / rename[1])
    return d


CASES = [
    ("a BERT folder", variant("bert", {"model_type": "bert",
                                       "architectures": ["BertForMaskedLM"]})),
    ("a Llama folder", variant("llama", {"model_type": "llama",
                                         "architectures": ["LlamaForCausalLM"]})),
    ("rotary positions (GPT-J)", variant("gptj", {"model_type": "gptj", "rotary_dim": 64,
                                                  "architectures": ["GPTJForCausalLM"]})),
    ("rotary positions (a GPT-2 config with rope_theta)",
     variant("gpt2-rope", {"rope_theta": 10000.0})),
    ("ALiBi positions (BLOOM)", variant("bloom", {"model_type": "bloom",
                                                  "architectures": ["BloomForCausalLM"]})),
    ("a .bin-only folder", variant("bin-only", rename=("model.safetensors", "pytorch_model.bin"))),
    ("a missing tokenizer", variant("no-tokenizer", drop=("vocab.json", "merges.txt"))),
    ("cross-attention in GPT-2", variant("cross", {"add_cross_attention": True})),
    ("the exact (erf) GELU", variant("erf", {"activation_function": "gelu"})),
    ("an untied output projection", variant("untied", {"tie_word_embeddings": False})),
]

for what, folder in CASES:
    cmd = [sys.executable, "-m", "scratchformer", "import", folder.name, "-o", "out.npz"]
    p = subprocess.run(cmd, cwd=work, capture_output=True, text=True,
                       env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
    lines = p.stderr.strip().splitlines()
    print(f"== {what}: scratchformer import {folder.name} -o out.npz")
    print(f"exit {p.returncode}, {len(lines)} line(s) on stderr:")
    print(p.stderr.strip())
    print()
assert not (work / "out.npz").exists(), "a refused import wrote its output"
print("no output written by any of them")
