#!/bin/bash
# usage: surprises.sh TREE LABEL OUTDIR -- each surprise's commands and output, tiny runs
TREE=$1; LABEL=$2; OUT=$3
mkdir -p "$OUT"; R=/tmp/nc54/$LABEL; rm -rf "$R"; mkdir -p "$R"
cd "$TREE"
sf() { PYTHONPATH=$TREE ${PY:-python} -m scratchformer "$@"; }
show() { echo "\$ scratchformer $*"; sf "$@" 2>&1; echo "(exit $?)"; }
D=/tmp/nc54/data

# 1. translate: repetition on an unfamiliar input (model: 150 steps on 120 pairs, test BLEU 83.70)
{ echo "# tree: $LABEL ($(git -C $TREE rev-parse --short HEAD)); model /tmp/nc54/tr (test BLEU 83.70, greedy)"
  echo "\$ printf 'El rey busca á la mujer.\nla la la la la la la la\n' | scratchformer translate --checkpoint /tmp/nc54/tr/checkpoints/final.npz --no-progress"
  printf 'El rey busca á la mujer.\nla la la la la la la la\n' | sf translate --checkpoint /tmp/nc54/tr/checkpoints/final.npz --no-progress 2>&1
  echo; } > "$OUT/translate_repetition.txt"

# 2. resume past the time limit; a run that ends with no average
RES="train --task reverse --set model.preset=tiny --set task.train_size=2000 --set task.valid_size=50 --set task.test_size=20 --no-progress --no-test --run-dir $R/resume --steps 300 --time-limit 3 --log-every 50 --eval-every 100 --checkpoint-every 100"
{ echo "# tree: $LABEL"; show $RES | tail -4; echo; show $RES --resume; } > "$OUT/resume_plan_and_average.txt"

# 3. plot attention of a run directory
{ echo "# tree: $LABEL"; ls $R/resume/checkpoints; show plot attention $R/resume "abcdef" --kind cross; } > "$OUT/plot_attention_run_dir.txt"

# 4. the pairs run: the two length limits (task.max_len=20 leaves some pairs out)
{ echo "# tree: $LABEL"; show train --config pairs --data-dir $D/pairs --set task.max_len=20 --steps 30 --checkpoint-every 6 --eval-every 30 --no-test --no-progress --run-dir $R/pairs | head -9; } > "$OUT/pairs_max_len.txt"

# 5. classifier and LM: the name of the dev quantity
{ echo "# tree: $LABEL"
  for t in classify lm; do d=$D/genre; [ $t = lm ] && d=$D/web-text
    show train --config $t --data-dir $d --steps 30 --checkpoint-every 6 --eval-every 15 --no-test --no-progress --run-dir $R/$t --set model.N=1 --set model.d_model=32 --set model.d_ff=64 --set model.h=2 | grep -v "^  "; echo; done; } > "$OUT/classify_lm_dev_loss.txt"

# 6. float16 on NumPy
{ echo "# tree: $LABEL"; show train --task reverse --set model.preset=tiny --set task.train_size=500 --set task.valid_size=20 --set task.test_size=8 --set train.precision=float16 --steps 10 --no-test --no-progress --run-dir $R/fp16 | head -8; } > "$OUT/float16_note.txt"
