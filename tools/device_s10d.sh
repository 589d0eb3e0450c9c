#!/usr/bin/env bash
# Session of 2026-11-23 (sixth), issue 27: the GPU tests of align(out=) and of aligned.tif
# written by the run, then one-shot `xcorr align --patches` with aligned.tif (cold, warm).
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
XCORR_REQUIRE_GPU=1 timeout 100 python3 -m pytest -m gpu -q -p no:cacheprovider \
  tests/cli/test_aligned_by_run.py tests/alignment/test_aligned_out.py tests/streaming 2>&1 | tail -3
python3 -c "
import tifffile
from xcorr_app.bench._align_patches import make_stack
s, _ = make_stack(1024, (512, 512), seed=0); tifffile.imwrite('/tmp/p1024.tif', s)"
A="align /tmp/p1024.tif --patches 4x4 --max-shift 14 --max-deviation 4 --no-verify --force -q --out /tmp/o/p"
for l in "first (cold), aligned.tif" "warm, aligned.tif" "warm, aligned.tif (again)" "warm, --no-aligned"; do
  x=; [ "$l" = "warm, --no-aligned" ] && x=--no-aligned
  t0=$EPOCHREALTIME; python3 -m xcorr_app.cli $A $x || echo FAILED
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$l" 'BEGIN {printf "| %-28s | %5.2f s |\n", l, b - a}'
done
