#!/usr/bin/env bash
# Sourced by the device scripts after tools/device_env.sh (a fresh machine): the device's name
# and driver JIT cache in $OUT/device.txt, then the one-shot `xcorr align --patches` rows: the
# first run with caches empty (its NVRTC compilations logged by tools/compile_log.py), warm
# runs, with aligned.tif, with the defaults; in $OUT/oneshot.txt.
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "driver JIT cache entries: $(find ~/.nv/ComputeCache -type f 2>/dev/null | wc -l)"; } | tee "$OUT/device.txt"
python3 -c "
import tifffile
from xcorr_app.bench._align_patches import make_stack
s, _ = make_stack(1024, (512, 512), seed=0); tifffile.imwrite('/tmp/p1024.tif', s)"
tm() { local l=$1; shift; local t0=$EPOCHREALTIME; "$@" >/dev/null 2>>"$OUT/err.txt" || echo "$l FAILED"
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$l" 'BEGIN {printf "| %-52s | %5.2f s |\n", l, b - a}'; }
C="CUPY_CACHE_DIR=/tmp/c/cupy XCORR_CACHE_DIR=/tmp/c/x"
A="align /tmp/p1024.tif --patches 4x4 --max-shift 14 --max-deviation 4 --no-verify --force -q"
{
rm -rf /tmp/c; tm "cold: --patches 4x4 1024 frames --no-aligned (logged)" env $C python3 tools/compile_log.py $OUT/compiles_patch.txt $OUT/prof_patch.txt $A --no-aligned --out /tmp/o/p
head -1 $OUT/compiles_patch.txt
tm "warm: --no-aligned" env $C python3 -m xcorr_app.cli $A --no-aligned --out /tmp/o/p
tm "warm: --no-aligned (again)" env $C python3 -m xcorr_app.cli $A --no-aligned --out /tmp/o/p
tm "warm: with aligned.tif" env $C python3 -m xcorr_app.cli $A --out /tmp/o/p
tm "warm: default (verify on), with aligned.tif" env $C python3 -m xcorr_app.cli align /tmp/p1024.tif --patches 4x4 --max-deviation 4 --force -q --out /tmp/o/p2
} 2>&1 | tee "$OUT/oneshot.txt"
