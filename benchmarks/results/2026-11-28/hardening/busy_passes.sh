#!/usr/bin/env bash
# The README's test command three times, side by side, with two `yes > /dev/null` beside
# them (so each run has both cores busy), in three fresh clones; the load average is
# sampled every 30 s.
set -u
commit=$1; py=$2; out=$3
mkdir -p "$out"
yes > /dev/null & y1=$!
yes > /dev/null & y2=$!
( while true; do echo "$(date -u +%T) $(cut -d' ' -f1-3 /proc/loadavg)"; sleep 30; done ) > "$out/load.txt" & s=$!
pids=()
for i in 1 2 3; do
  d=$(mktemp -d)/scratchformer
  git clone -q /work/main "$d" && git -C "$d" checkout -q "$commit"
  ( cd "$d" && start=$SECONDS && "$py" -m pytest -p no:cacheprovider > "$out/pass$i.txt" 2>&1; echo "exit $? after $((SECONDS - start)) s" >> "$out/pass$i.txt" ) &
  pids+=($!)
  sleep 20
done
wait "${pids[@]}"
kill $y1 $y2 $s
