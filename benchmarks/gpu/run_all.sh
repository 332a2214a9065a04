#!/usr/bin/env bash
# Everything a first GPU run must prove, in stages, offline, installing nothing:
#   benchmarks/gpu/run_all.sh OUT [--stages smoke,parity,...] [--quick]
# Run from anywhere in a source checkout, with the environment's python3 (CuPy for the
# GPU's CUDA, PyTorch, pytest, tqdm, threadpoolctl; sacreBLEU and SentencePiece for the
# translation tests). Logs and JSON go into OUT, stage by stage (see run_all.py).
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 1 ]; then
  echo "usage: benchmarks/gpu/run_all.sh OUT [--stages a,b,...] [--quick]" >&2
  exit 2
fi
OUT=$1
shift
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export CUPY_CACHE_DIR="$(cd "$OUT" && pwd)/cupy-cache"
exec python3 benchmarks/gpu/run_all.py --out "$OUT" "$@"
