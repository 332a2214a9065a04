#!/bin/bash
# usage: gc_asis.sh TREE OUTFILE: gradcheck --preset small --directions 1, the machine as it is (shared)
TREE=$1; OUTF=$2; shift 2
cd "$TREE"
{ echo "# tree $(git rev-parse --short HEAD), nothing of ours beside it (other sessions' jobs may run); uptime before: $(uptime)"
  echo "\$ scratchformer gradcheck --preset small --directions 1 --no-progress $*"
  /usr/bin/time -f "wall %e s, user %U s, sys %S s" env PYTHONPATH=$TREE ${PY:-python} -m scratchformer gradcheck --preset small --directions 1 --no-progress "$@" 2>&1
  echo "(exit $?) uptime after: $(uptime)"; } > "$OUTF" 2>&1
