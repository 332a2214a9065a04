#!/bin/bash
# must-show 3 of the newcomer walk: the README's wide run and copy, both scores and the final model
export PYTHONPATH=/tmp/w47 OPENBLAS_NUM_THREADS=1
cd /tmp/ms3
for args in "--name wide --steps 1000 --set model.d_model=128" "--config copy" ""; do
  echo "### scratchformer train $args"
  /usr/bin/time -f "wall %e s" /work/main/.venv/bin/python -m scratchformer train $args --no-progress 2>&1 | grep -v "^step\|^  step" 
done
