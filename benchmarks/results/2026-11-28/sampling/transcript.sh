#!/usr/bin/env bash
# The sampling and --interactive transcript (README.md beside it says how the models were made).
#   transcript.sh TRANSLATION_CHECKPOINT LM_CHECKPOINT SOURCES.txt > transcript.txt
# Run from the repository root; PY is the project's Python (default: python).
set -uo pipefail
CKPT=$1; LM=$2; SRC=$3
PY=${PY:-python}
WORK=$(mktemp -d)

run() {  # print the command as typed, then what it writes (standard output and error)
  echo "\$ $*"
  eval "$@" 2>&1
  echo "[exit $?]"
  echo
}
scratchformer() { $PY -m scratchformer "$@"; }

echo "# sources ($SRC)"
cat -n "$SRC"
echo
T="scratchformer translate --checkpoint $CKPT --no-progress"
run "$T --input $SRC"
run "$T --input $SRC --sample --seed 1"
run "$T --input $SRC --sample --seed 1 --samples 3"
run "$T --input $SRC --sample --seed 1 --samples 3 > $WORK/a.tsv; $T --input $SRC --sample --seed 1 --samples 3 --chunk-size 1 --batch-size 1 > $WORK/b.tsv; cmp $WORK/a.tsv $WORK/b.tsv && echo same samples, line by line and in one batch"
run "$T --input $SRC --sample --seed 2 --samples 3"
run "head -n 1 $SRC | $T --sample --seed 1 --samples 8 --temperature 1.5"
run "head -n 1 $SRC | $T --sample --seed 1 --samples 8 --temperature 1.5 --top-k 2"
run "head -n 1 $SRC | $T --sample --seed 1 --samples 8 --temperature 1.5 --top-p 0.6"
run "head -n 1 $SRC | $T --sample --temperature 0; head -n 1 $SRC | $T --greedy"
run "$T --input $SRC --sample --nbest 2"
run "$T --input $SRC --top-p 0.9"

echo "# --interactive through a pipe: each line answered as it comes"
run "(head -n 1 $SRC; sleep 2; sed -n 2p $SRC) | $T --interactive"
run "head -n 2 $SRC | $T --interactive --sample --samples 2 --seed 1"
echo "# --interactive on a terminal (a pseudo-terminal made by script(1); the typed lines"
echo "# echo first, as the terminal echoes what was typed ahead)"
run "(head -n 2 $SRC; sleep 3) | script -qc \"$PY -m scratchformer translate --checkpoint $CKPT --interactive --scores\" /dev/null | tr -d '\\r'"

echo "# generate: the same flags"
G="scratchformer generate --checkpoint $LM --max-new 80"
run "$G --prompt 'In the beginning' --samples 3 --seed 1 --top-p 0.9"
run "$G --prompt 'In the beginning' --samples 3 --seed 1 --top-p 0.9"
run "$G --prompt 'In the beginning' --num 3 --seed 1 --top-p 0.9 --temperature 0"
rm -rf "$WORK"
