#!/usr/bin/env bash
# The worked example of docs/import.md's Marian section, on a small random Marian built
# here by transformers (tests/hf/marian_folders.py: 2 + 2 layers, 2 heads, d_model 32,
# SiLU, non-zero biases and final_logits_bias; two SentencePiece models and vocab.json
# trained on a generated text): import, translate, plot attention, gradcheck
# --checkpoint, fine-tuning with train --init-from on a `data pairs` set, evaluate,
# average, export, and the exported folder's greedy output in transformers.
#
#   ./worked_example.sh TREE WORK > worked_example.txt 2>&1
set -euo pipefail
TREE=$(cd "$1" && pwd)
WORK=$2
PY=${PY:-python}
mkdir -p "$WORK" && cd "$WORK" && rm -rf tiny-marian tiny-marian.npz plots mine.tsv data ft \
  ft-avg.npz exported src.txt
export PYTHONPATH=$TREE OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
sf() { echo; echo "\$ scratchformer $*"; $PY -m scratchformer "$@"; }

echo "\$ python -c '... transformers_marian(Path(\"tiny-marian\"))'   # tests/hf/marian_folders.py"
$PY -c "import sys; sys.path.insert(0, '$TREE/tests/hf'); from pathlib import Path
from marian_folders import transformers_marian; transformers_marian(Path('tiny-marian'))" 2>/dev/null
ls tiny-marian
sf import tiny-marian -o tiny-marian.npz
printf 'ka to ri\nmen sa lo ver\n' > src.txt
sf translate --checkpoint tiny-marian.npz --input src.txt --greedy
sf plot attention tiny-marian.npz "ka to ri über café" -o plots
echo; echo "\$ scratchformer gradcheck --checkpoint tiny-marian.npz --directions 2 --no-progress | tail -n 6"
$PY -m scratchformer gradcheck --checkpoint tiny-marian.npz --directions 2 --no-progress | tail -n 6

echo; echo "\$ python -c '...'   # mine.tsv: 500 pairs, a few made-up words -> the same reversed"
$PY - <<'PY'
import random
r = random.Random(0)
W = ["ka", "to", "ri", "men", "sa", "lo", "ver", "gen", "da", "ni", "por", "que"]
lines = []
for _ in range(500):
    w = [r.choice(W) for _ in range(r.randint(2, 5))]
    lines.append(f"{' '.join(w)}\t{' '.join(reversed(w))}")
open("mine.tsv", "w").write("\n".join(lines) + "\n")
PY
head -3 mine.tsv
sf data pairs mine.tsv --out data
sf train --task translate --init-from tiny-marian.npz --data-dir data --run-dir ft --steps 200 \
  --set 'optim.schedule="constant"' --set optim.lr=1e-3 --warmup 20 --log-every 20 \
  --eval-every 100 --checkpoint-every 20 --max-tokens 256 --set 'task.decode="greedy"' \
  --no-progress
sf translate --checkpoint ft/checkpoints/final.npz --input src.txt --greedy
sf evaluate --checkpoint ft/checkpoints/final.npz --data-dir data --greedy --no-progress
sf average ft/checkpoints --last 3 -o ft-avg.npz
echo; echo "\$ scratchformer gradcheck --checkpoint ft/checkpoints/final.npz --directions 1 --no-progress | tail -n 4"
$PY -m scratchformer gradcheck --checkpoint ft/checkpoints/final.npz --directions 1 --no-progress | tail -n 4
sf export ft/checkpoints/final.npz -o exported
ls exported

echo; echo "\$ python -c '...'   # the exported folder in transformers: MarianTokenizer, generate"
$PY - <<'PY' 2>/dev/null
from transformers import AutoTokenizer, MarianMTModel
tok = AutoTokenizer.from_pretrained("exported")
model = MarianMTModel.from_pretrained("exported")
batch = tok(["ka to ri", "men sa lo ver"], return_tensors="pt", padding=True)
out = model.generate(**batch, num_beams=1, do_sample=False, max_length=22)
print(type(tok).__name__, tok.batch_decode(out, skip_special_tokens=True))
PY
