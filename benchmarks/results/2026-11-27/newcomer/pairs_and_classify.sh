#!/bin/bash
# the README's pairs recipe and the classifier, one after the other, with their logs
export PYTHONPATH=/tmp/w47 OPENBLAS_NUM_THREADS=1
SF="/work/main/.venv/bin/python -m scratchformer"
while pgrep -f /tmp/ms3/run.sh >/dev/null; do sleep 10; done
cd /tmp/runs2
T0=$(date +%s)
{ $SF data bible && awk -F'\t' 'NR % 13 == 0 && n++ < 2000 { print $1 "\t" $2 }' data/bible/train.tsv > data/my-pairs.tsv
$SF data pairs data/my-pairs.tsv
/usr/bin/time -v $SF train --config pairs --data-dir data/my-pairs --no-progress
echo "En el principio creó Dios los cielos y la tierra." | $SF translate --checkpoint runs/pairs/checkpoints/final.npz; } > pairs.log 2>&1
echo "pairs recipe: $(( $(date +%s) - T0 )) s" >> pairs.log
T0=$(date +%s)
{ $SF data genre && /usr/bin/time -v $SF train --config classify --no-progress; } > classify.log 2>&1
echo "classify: $(( $(date +%s) - T0 )) s" >> classify.log
