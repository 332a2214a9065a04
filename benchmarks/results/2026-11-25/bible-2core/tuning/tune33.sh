#!/bin/bash
# equal-wall-time candidates for the 2-core Bible config, on dev; one at a time, machine quiet
cd /work/wt33; export PYTHONPATH=$PWD
SF=/work/main/.venv/bin/scratchformer
T=${T:-720}
run() { name=$1; shift
  echo "== $name $* $(date +%T)"
  $SF train --config bible-cpu --ranks 2 --name $name --set run_dir=\"/work/runs33/$name\" \
    --set train.time_limit=$T --set train.steps=100000 --set train.test=false \
    --set train.eval_every=0 --set train.checkpoint_every=100000 --set train.log_every=100 \
    --no-progress "$@" > /work/runs33/$name.log 2>&1
  grep "valid\|done" /work/runs33/$name.log | tail -2
}
run A-t4096-w600
run C-t4096-w300 --set optim.warmup=300
run B-t8192-w300 --set train.max_tokens=8192 --set optim.warmup=300
run D-N4-t4096-w600 --set model.N=4
echo ALLDONE $(date +%T)
