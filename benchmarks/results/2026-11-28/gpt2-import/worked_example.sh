#!/usr/bin/env bash
# The worked example of docs/import.md, on a small random GPT-2 built here by transformers
# (tests/hf/gpt2_folders.py: 2 layers, 4 heads, d_model 32, a byte-level BPE of 2,600 ids
# trained on a generated text): import, generate, plot attention, gradcheck --checkpoint,
# fine-tuning with train --init-from, then average and a check of the fine-tuned model.
#
#   ./worked_example.sh TREE WORK > worked_example.txt 2>&1
set -euo pipefail
TREE=$(cd "$1" && pwd)
WORK=$2
PY=${PY:-python}
mkdir -p "$WORK" && cd "$WORK" && rm -rf tiny-gpt2 tiny-gpt2.npz plots my-text ft ft-avg.npz
export PYTHONPATH=$TREE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
sf() { echo; echo "\$ scratchformer $*"; $PY -m scratchformer "$@"; }

echo "\$ python -c '... transformers_gpt2(Path(\"tiny-gpt2\"))'   # tests/hf/gpt2_folders.py"
$PY -c "import sys; sys.path.insert(0, '$TREE/tests/hf'); from pathlib import Path
from gpt2_folders import transformers_gpt2; transformers_gpt2(Path('tiny-gpt2'))" 2>/dev/null
ls tiny-gpt2
sf import tiny-gpt2 -o tiny-gpt2.npz
sf generate --checkpoint tiny-gpt2.npz --prompt "Hello" --max-new 12 --temperature 0
sf plot attention tiny-gpt2.npz "Hello wörld, 2024!" -o plots
sf gradcheck --checkpoint tiny-gpt2.npz --directions 2 --no-progress
sf gradcheck --checkpoint tiny-gpt2.npz --no-progress

echo; echo "\$ python -c '...'   # my-text/{train,dev,test}.txt: 400/40/40 short sentences"
$PY - <<'PY'
import random
from pathlib import Path
r = random.Random(0)
S = ["the cat", "a dog", "my friend", "the old man", "our teacher", "the bird"]
V = ["sees", "likes", "finds", "follows", "paints", "greets"]
O = ["the river", "a red ball", "the small house", "the garden", "a quiet street"]
Path("my-text").mkdir()
for split, n in (("train", 400), ("dev", 40), ("test", 40)):
    lines = [f"{r.choice(S)} {r.choice(V)} {r.choice(O)}." for _ in range(n)]
    Path(f"my-text/{split}.txt").write_text("\n".join(lines) + "\n")
PY
head -3 my-text/train.txt
sf train --task lm --init-from tiny-gpt2.npz --data-dir my-text --run-dir ft --steps 200 \
  --set 'optim.schedule="constant"' --set optim.lr=1e-3 --warmup 20 --log-every 20 \
  --eval-every 100 --checkpoint-every 20 --max-tokens 256 --set task.sample_len=30 --no-progress
sf generate --checkpoint ft/checkpoints/final.npz --prompt "the cat" --max-new 12 --temperature 0
sf average ft/checkpoints --last 3 -o ft-avg.npz
sf gradcheck --checkpoint ft/checkpoints/final.npz --directions 1 --no-progress | tail -n 4
