#!/bin/bash
while ! grep -q ALLDONE /work/runs33/tune.out; do sleep 5; done
cd /work/wt33; export PYTHONPATH=$PWD
SF=/work/main/.venv/bin/scratchformer
T=720
name=E-t4096-w600-f0.7
echo "== $name $(date +%T)"
$SF train --config bible-cpu --ranks 2 --name $name --set run_dir=\"/work/runs33/$name\" \
    --set train.time_limit=$T --set train.steps=100000 --set train.test=false \
    --set train.eval_every=0 --set train.checkpoint_every=100000 --set train.log_every=100 \
    --no-progress --set optim.lr_factor=0.7 > /work/runs33/$name.log 2>&1
grep "valid\|done" /work/runs33/$name.log | tail -2
echo EDONE $(date +%T)
