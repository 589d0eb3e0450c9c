#!/usr/bin/env bash
# Session of 2026-11-23, last calls.  PART=1: the shipped kernels built in place (the installed
# package), the GPU suite, cold and warm one-shot runs (tools/device_s4.sh).  PART=2: the
# planner's small rows (xcorr bench xcorr), in-process bounded vs unbounded (tools/ab_align.py),
# the patch bench.  Logs under $OUT.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ "${PART:-1}" = 3 ]; then  # the whole xcorr bench: the cost model against tuned on every row
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl >/dev/null 2>&1
  export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
  [ -f xcorr_app/_cuda/built/index.json ] || python3 -m xcorr_app._cuda.compile_check --keep 2>&1 | tail -1
  timeout 480 python3 -m xcorr_app.cli bench xcorr > "$OUT/bench_xcorr_full.txt" 2>&1
  grep -E "^\| |cost model vs tuned" "$OUT/bench_xcorr_full.txt" | cut -c1-220
  exit 0
fi
if [ "${PART:-1}" = 1 ]; then
  SUITE=1 SUITE_T=330 bash tools/device_s4.sh 2>&1 | tail -40
  exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
[ -f xcorr_app/_cuda/built/index.json ] || python3 -m xcorr_app._cuda.compile_check --keep 2>&1 | tail -2
timeout 150 python3 -m xcorr_app.cli bench xcorr --only one_to_one > "$OUT/bench_xcorr.txt" 2>&1
timeout 60 python3 -m xcorr_app.cli bench xcorr --only 1x8 >> "$OUT/bench_xcorr.txt" 2>&1
grep -E "^\| one_to|cost model vs tuned" "$OUT/bench_xcorr.txt"
mkdir -p /tmp/probe
python3 -c "
import os
from xcorr_app.bench._align_data import SyntheticStack, default_workers
SyntheticStack(512, (1024, 1024), seed=0).write('/tmp/probe/m512.tif', workers=default_workers())
if not os.path.exists('/tmp/probe/s512.tif'):
    SyntheticStack(512, (2048, 2048), seed=0).write('/tmp/probe/s512.tif', workers=default_workers())"
{ for s in s512 m512; do echo "$s:"; timeout 120 python3 tools/ab_align.py /tmp/probe/$s.tif none none,noverify 16 16,noverify; done; } 2>&1 | tee "$OUT/ab_align.txt"
timeout 170 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 > "$OUT/bench_patches.txt" 2>&1; tail -14 "$OUT/bench_patches.txt"
