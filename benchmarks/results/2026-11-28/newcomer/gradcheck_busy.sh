#!/bin/bash
# usage: gc_busy.sh TREE OUTFILE [extra gradcheck args]: gradcheck --preset small --directions 1 with both cores busy
TREE=$1; OUTF=$2; shift 2
cd "$TREE"
yes > /dev/null & Y1=$!
yes > /dev/null & Y2=$!
sleep 2
{ echo "# tree $(git rev-parse --short HEAD), two 'yes > /dev/null' running (pids $Y1 $Y2); uptime before: $(uptime)"
  echo "\$ scratchformer gradcheck --preset small --directions 1 --no-progress $*"
  /usr/bin/time -f "wall %e s, user %U s, sys %S s" env PYTHONPATH=$TREE ${PY:-python} -m scratchformer gradcheck --preset small --directions 1 --no-progress "$@" 2>&1
  echo "(exit $?) uptime after: $(uptime)"; } > "$OUTF" 2>&1
kill $Y1 $Y2
