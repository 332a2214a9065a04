#!/usr/bin/env bash
# The default run (reverse strings, 3,000 steps) in float32, then in mixed precision
# (float16 activations emulated on NumPy, float32 master weights, dynamic loss scaling).
set -u
# run from a checkout of the commit measured (PYTHONPATH pointed at it)
PY=${PY:-python}
for p in float32 float16; do
  start=$(date +%s.%N)
  $PY -m scratchformer train --name "default-$p" --run-dir "runs/default-$p" --set train.precision=$p --no-progress > "default-$p.log" 2>&1
  rc=$?
  end=$(date +%s.%N)
  echo "$p rc=$rc wall=$(echo "$end - $start" | bc) s" >> wall.txt
done
