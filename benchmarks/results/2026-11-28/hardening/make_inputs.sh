#!/bin/sh
# The inputs of attack.py and cases.py in WORK (default /tmp/h55/attack): my.tsv (the
# tests' 120 Spanish -> English pairs), my2.tsv (100 of them, shuffled), the data sets
# d1/ and d2/ that `data pairs` makes of them, and two small translation models trained a
# few steps by `train --config pairs`: new.npz on d1 (2 steps), old.npz on d2 (3 steps,
# another seed): another vocabulary, so that their exports differ in the weights and
# both tokenizer files, and a mix of the two (new weights, old tokenizer) can be told.
# TREE: the checkout whose package makes them (default: this one).
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
TREE=${TREE:-$(cd "$HERE/../../../.." && pwd)}
WORK=${1:-/tmp/h55/attack}
PY=${PY:-/work/main/.venv/bin/python}
mkdir -p "$WORK" && cd "$WORK"
PYTHONPATH="$TREE:$TREE/tests" "$PY" - <<'PYEOF'
import random
from task_data import corpus
pairs = corpus()
open("my.tsv", "w").write("".join(f"{s}\t{t}\n" for s, t in pairs))
random.seed(1)
random.shuffle(pairs)
open("my2.tsv", "w").write("".join(f"{s}\t{t}\n" for s, t in pairs[:100]))
PYEOF
sf() { PYTHONPATH="$TREE" "$PY" -m scratchformer "$@"; }
rm -rf d1 d2 r-new r-old
sf data pairs my.tsv --out d1
sf data pairs my2.tsv --out d2
sf train --config pairs --set task.data_dir=d1 --steps 2 --run-dir r-new --no-progress --no-test > /dev/null
sf train --config pairs --set task.data_dir=d2 --steps 3 --seed 7 --run-dir r-old --no-progress --no-test > /dev/null
cp r-new/checkpoints/final.npz new.npz
cp r-old/checkpoints/final.npz old.npz
ls -l my.tsv my2.tsv new.npz old.npz d1 d2
