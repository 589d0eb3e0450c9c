#!/usr/bin/env bash
# One device call for the align issue: GPU tests, stage probe, xcorr bench align, and one-shot
# `xcorr align` processes on the bench's stack (what a command-line user pays, start-up
# included); logs in $OUT.
set -u -o pipefail
export PYTHONPATH=$PWD${XCORR_EXTRA_PATH:+:$XCORR_EXTRA_PATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export XCORR_CACHE_DIR=$OUT/cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } 2>&1 | tee "$OUT/device.txt"
python3 -m pytest -m gpu -q -n 8 -p no:cacheprovider -p no:benchmark 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -15
python3 tools/align_stage_probe.py 32 2048 2>&1 | tee "$OUT/stages.txt"
WORK=$(mktemp -d)
python3 -m xcorr_app.cli bench align --force --keep --workdir "$WORK" --json "$OUT/bench_align.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_align.txt"
STACK=$(ls "$WORK"/*/stack.tif | head -1)
for args in "--max-shift 16" ""; do
  s=$(date +%s%N)
  python3 -m xcorr_app.cli align "$STACK" $args --no-aligned --force --out "$WORK/out" > /dev/null 2>&1
  rc=$?
  echo "one-shot xcorr align $args --no-aligned: rc $rc in $(( ($(date +%s%N) - s) / 1000000 )) ms (process start-up and outputs included)" | tee -a "$OUT/oneshot.txt"
done
rm -rf "$WORK"
