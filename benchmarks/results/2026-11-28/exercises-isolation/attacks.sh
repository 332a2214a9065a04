#!/usr/bin/env bash
# Each attack of the issue (and the engine reached by a computed name) through
# `scratchformer exercise check` and `exercise train`, with benchmarks/exercise_isolation.py:
# output, exit status, the processes left (ps), the folder's hashes before and after.
#
#   bash benchmarks/results/2026-11-28/exercises-isolation/attacks.sh [TREE] [PYTHON]
#
# TREE: the tree measured (default: this checkout); PYTHON: an interpreter with NumPy.
# Writes attacks.json (every row), attacks_table.md (a row per command) and attacks_log.txt
# (every output in full) beside this script, then the ps of every process a case names
# (leftover-...) still running once all is done (attacks_ps_after.txt). The learner's
# processes (sfl-...) are looked for after each command, by their folder (attacks_log.txt):
# on a shared machine another check's may be running when this script ends.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
tree="$(cd "${1:-$root}" && pwd)"
py="${2:-python}"
cd "$root"
git -C "$tree" log -1 --format='tree: %h %s' > "$here/attacks_tree.txt" 2>/dev/null || true
"$py" benchmarks/exercise_isolation.py run "$tree" > "$here/attacks.json"
"$py" benchmarks/exercise_isolation.py table "$here/attacks.json" > "$here/attacks_table.md"
"$py" benchmarks/exercise_isolation.py log "$here/attacks.json" > "$here/attacks_log.txt"
{ echo "\$ ps -eo pid,ppid,sid,stat,comm,args | grep leftover | grep -v grep"
  ps -eo pid,ppid,sid,stat,comm,args | grep leftover | grep -v grep || echo "(none)"
} > "$here/attacks_ps_after.txt"
