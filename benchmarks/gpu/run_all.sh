#!/usr/bin/env bash
# Everything a first GPU run must prove, in two planned calls, offline, installing nothing:
#   benchmarks/gpu/run_all.sh OUT --call 1|2 [--budget S] [--work DIR] [--data DIR] [--quick]
#   benchmarks/gpu/run_all.sh OUT --stages smoke,parity,...
# Run from anywhere in a source checkout, with the environment's python3 (CuPy for the
# GPU's CUDA, PyTorch, pytest, tqdm, threadpoolctl; sacreBLEU and SentencePiece for the
# translation tests), or the one named by $PYTHON. OUT gets logs.tar.gz and summary.json
# alone; the kernel cache, the run folders and the logs stay in the work folder (see
# run_all.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 1 ]; then
  echo "usage: benchmarks/gpu/run_all.sh OUT (--call 1|2 | --stages a,b,...) [--quick]" >&2
  exit 2
fi
OUT=$1
shift
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" benchmarks/gpu/run_all.py --out "$OUT" "$@"
