#!/usr/bin/env bash
# Session of 2026-11-23 (seventh), issue 27 (a fresh machine): lucas_kanade auto judged on the
# GPU and decided first.  The cold one-shot `xcorr align --patches` (compilations logged) and
# warm runs; the GPU suite; GPU-resident walls with lucas_kanade auto against off and the
# judgement's time (tools/gap_probe.py); Nsight Compute on the refinement kernel; then
# `xcorr bench align --patches 4x4` on 4096 frames of 512x512.  Logs under $OUT.
. tools/device_env.sh
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
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 280 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1; tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 150 python3 tools/gap_probe.py 4096 2>&1 | grep -v -i warn > "$OUT/gaps.txt"; cat "$OUT/gaps.txt"
timeout 100 bash tools/ncu_refine.sh > "$OUT/ncu.txt" 2>&1; tail -30 "$OUT/ncu.txt"
timeout 200 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
tail -14 "$OUT/bench_patches.txt"
