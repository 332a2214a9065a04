#!/usr/bin/env bash
# Each data-loss example of the hardening issue, run for real: the command, its output
# (the one-line refusal), and the SHA-256 of the files at stake before and after.
# Usage: bash data_loss.sh [scratchformer]   (default: the scratchformer on PATH)
set -u
S=${1:-scratchformer}
W=$(mktemp -d)
cd "$W" || exit 1
export XDG_STATE_HOME="$W/state"
sums() { sha256sum "$@" 2>&1 | sed "s|$W/||" | awk '{print "    " $0}'; }
case_() {  # case_ TITLE FILES... -- COMMAND...
  local title=$1; shift
  local files=()
  while [ "$1" != "--" ]; do files+=("$1"); shift; done
  shift
  echo "== $title"
  echo "\$ scratchformer ${*:2}" | sed "s|$W/||g"
  echo "  before:"; sums "${files[@]}"
  "$@" > out.txt 2> err.txt; rc=$?
  echo "  exit $rc, stderr:"; sed "s|$W/||g; s/^/    /" err.txt
  echo "  after:"; sums "${files[@]}"
  echo
}
$S train --config reverse --set task.train_size=400 --steps 4 --checkpoint-every 2 \
  --run-dir run --no-progress --no-test > /dev/null 2>&1
CK=run/checkpoints/checkpoint_4.npz
mkdir -p data && printf 'abc\tcba\nde\ted\nfgh\thgf\n' > data/train.tsv
cp data/train.tsv data/dev.tsv && cp data/train.tsv data/test.tsv

ln -s "$W/$CK" x.png
case_ "plot schedule -o x.png, x.png a symbolic link to a checkpoint" "$CK" -- \
  $S plot schedule -o x.png
ln "$CK" y.png
case_ "plot schedule -o y.png, y.png a hard link to a checkpoint" "$CK" -- \
  $S plot schedule -o y.png
ln -s "$W/run/metrics.jsonl" m.png
case_ "plot curves run -o m.png, m.png a link to the run's own metrics.jsonl" run/metrics.jsonl -- \
  $S plot curves run -o m.png
echo "my notes" > notes.png
case_ "plot schedule -o notes.png, an existing file that is not a plot, no --overwrite" notes.png -- \
  $S plot schedule -o notes.png
case_ "evaluate --output data/train.tsv, the data set's own training split" data/train.tsv -- \
  $S evaluate --checkpoint "$CK" --data-dir data --output data/train.tsv --greedy
mkdir -p q/train && python3 -c "
print(''.join(f'src {i}\ttgt {i}\n' for i in range(300)), end='')" > q/train/train.tsv
case_ "data pairs q/train/train.tsv --data-dir q: its splits over its own input" q/train/train.tsv -- \
  $S data pairs q/train/train.tsv --data-dir q
mkdir -p r && cp q/train/train.tsv r/mine.tsv && mkdir -p r/mine && ln -s "$W/r/mine.tsv" r/mine/train.tsv
case_ "data pairs r/mine.tsv --data-dir r: r/mine/train.tsv a symbolic link to the input" r/mine.tsv -- \
  $S data pairs r/mine.tsv --data-dir r
mkdir -p g/genre && echo "law	my own labelled verse	Lev 1:1" > g/genre/train.tsv
case_ "data genre --data-dir g: the user's existing g/genre/train.tsv" g/genre/train.tsv -- \
  $S data genre --data-dir g --no-install
mkdir -p ex outside && echo "my own notes" > outside/notes.md && ln -s "$W/outside/notes.md" ex/relu.hints.md
case_ "exercise hint relu --dir ex: ex/relu.hints.md a link to a file outside the folder" outside/notes.md -- \
  $S exercise hint relu --dir ex
rm -rf "$W"
