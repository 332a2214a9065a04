#!/bin/bash
cd /work/wt33; export PYTHONPATH=$PWD
SF=/work/main/.venv/bin/scratchformer
echo "start $(date +%T) $(date +%s.%N)"
$SF train --config bible-2core --ranks 2 --set run_dir=\"/work/runs33/bible-2core\" --no-progress > /work/runs33/bible-2core.log 2>&1
echo "rc $? end $(date +%T) $(date +%s.%N)"
