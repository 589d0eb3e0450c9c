#!/usr/bin/env bash
# One call on the device machine after tools/device_run.sh: the benchmarks of the issues, logs
# under $OUT.  bench xcorr (the cost model's plan beside the tuned one), bench align on the GPU
# (in process, peers and one-shot processes cold/warm), bench align --device cpu (300 frames of
# 1024x1024 against the skimage loop).  Usage (device tool, carry .whl): bash tools/device_bench.sh
set -u -o pipefail
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit 1
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export XCORR_CACHE_DIR=/tmp/bench-cache CUPY_CACHE_DIR=/tmp/bench-cupy
run() {  # $1: log name, rest: command
  local log=$1; shift
  local t0=$EPOCHREALTIME
  "$@" > "$OUT/$log" 2>&1; local rc=$?
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$log" -v r="$rc" 'BEGIN {printf "%-22s rc=%s %6.1f s\n", l, r, b - a}'
}
{
  run bench_xcorr.txt python3 -m xcorr_app.cli bench xcorr --json "$OUT/bench_xcorr.json"
  run bench_align_cpu.txt python3 -m xcorr_app.cli bench align --device cpu --json "$OUT/bench_align_cpu.json"
  run bench_align_gpu.txt python3 -m xcorr_app.cli bench align --json "$OUT/bench_align_gpu.json"
} 2>&1 | tee "$OUT/bench_times.txt"
tail -4 "$OUT/bench_xcorr.txt"; tail -8 "$OUT/bench_align_cpu.txt"; tail -22 "$OUT/bench_align_gpu.txt"
