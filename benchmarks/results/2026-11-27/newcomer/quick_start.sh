#!/bin/bash
# the README's two quick-start commands, exactly as written, in a fresh clone named scratchformer
cd /tmp/ms1/scratchformer
echo "## 1: python3 -m venv .venv && . .venv/bin/activate && pip install -e . && scratchformer train"
date -u
T0=$(date +%s.%N)
( python3 -m venv .venv && . .venv/bin/activate && pip install -e . && scratchformer train ) > /tmp/ms1/cmd1.log 2>&1
echo "rc=$? wall=$(echo "$(date +%s.%N) - $T0" | bc) s"
echo "## 2: python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && python -m pytest"
date -u
T0=$(date +%s.%N)
( python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && python -m pytest ) > /tmp/ms1/cmd2.log 2>&1
echo "rc=$? wall=$(echo "$(date +%s.%N) - $T0" | bc) s"
date -u
uptime
