#!/usr/bin/env bash
# The verdict's evidence: each case of cases.py through `exercise train` (3 steps) or
# `exercise check` (--seed 12345), with a tree, its output, exit status and wall time.
#
#   bash run.sh TREE LABEL [PYTHON [CASE ...]]   # e.g. bash run.sh /tmp/before-60 before
#
# Writes LABEL_<case>.txt (the command, its whole output, its exit status and wall time)
# beside this script. The folders are made afresh in a scratch folder from this
# checkout's cases.py with TREE's exercises (the solutions are the engine's code: the
# same text in both trees). A `train` command gets at most 300 s (`timeout`).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tree="$(cd "$1" && pwd)"
label="$2"
py="${3:-python}"
shift 3 2>/dev/null || shift $#
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(train_gamma train_nan32 train_slow check_embedding_loop \
                                  check_gelu_constant check_encoder_kv)
work="$(mktemp -d)"
PYTHONPATH="$tree" "$py" "$here/cases.py" "$work"
for case in "${cases[@]}"; do
  cd "$work/$case"
  case "$case" in
    train_*) cmd=(exercise train --steps 3 --no-progress) ;;
    check_embedding_loop) cmd=(exercise check embedding --seed 12345) ;;
    check_gelu_constant) cmd=(exercise check gelu --seed 12345) ;;
    check_encoder_kv) cmd=(exercise check encoder_layer --seed 12345) ;;
  esac
  out="$here/${label}_${case}.txt"
  echo "\$ scratchformer ${cmd[*]}    (tree: $(git -C "$tree" log -1 --format=%h))" > "$out"
  t0=$(date +%s.%N)
  PYTHONPATH="$tree" timeout 300 "$py" -m scratchformer "${cmd[@]}" >> "$out" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  printf '[exit status %s, wall %.1f s%s]\n' "$rc" "$(echo "$t1 - $t0" | bc)" \
    "$([ "$rc" = 124 ] && echo ': stopped by timeout 300')" >> "$out"
  tail -1 "$out"
done
rm -rf "$work"
