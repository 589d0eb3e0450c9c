#!/usr/bin/env bash
# Session of 2026-11-23 (fourth), the final call, on a fresh machine (empty driver, CuPy and
# xcorr caches first): cold one-shot runs (issue 26), the bench's pipeline rows and the plan
# call's layers (issue 24), warm one-shot 4 GiB runs against plain reads (issue 26), the
# --patches bench (issue 27), cuFFT's build, then the whole GPU suite.  Logs under $OUT.
. tools/device_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; grep -m1 "model name" /proc/cpuinfo
python3 -m xcorr_app.cli info 2>&1 | grep -E "compiled launch|shipped built"
ls ~/.nv/ComputeCache 2>/dev/null | head -2; echo "driver JIT cache entries: $(find ~/.nv/ComputeCache -type f 2>/dev/null | wc -l)"
mkdir -p /tmp/probe
python3 -c "
from xcorr_app.bench._align_data import SyntheticStack, default_workers
SyntheticStack(64, (2048, 2048), seed=0).write('/tmp/probe/s64.tif', workers=default_workers())
SyntheticStack(512, (2048, 2048), seed=0).write('/tmp/probe/s512.tif', workers=default_workers())"
tm() { local l=$1; shift; local t0=$EPOCHREALTIME; "$@" >/dev/null 2>>"$OUT/err.txt" || echo "$l FAILED"
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$l" 'BEGIN {printf "| %-48s | %5.2f s |\n", l, b - a}'; }
pr() { python3 -c "import json; d=json.load(open('$1/shifts.json')); print('  printed', d['frames_per_second'], 'frames/s,', d['seconds_measuring'], 's measuring')"; }
C="CUPY_CACHE_DIR=/tmp/c/cupy XCORR_CACHE_DIR=/tmp/c/x"
{
rm -rf /tmp/c; tm "cold: s64 --max-shift 16 (fresh machine)" env $C python3 -m xcorr_app.cli align /tmp/probe/s64.tif --max-shift 16 --out /tmp/o/s64 --force --no-aligned -q; pr /tmp/o/s64
tm "warm: s64 --max-shift 16" env $C python3 -m xcorr_app.cli align /tmp/probe/s64.tif --max-shift 16 --out /tmp/o/s64w --force --no-aligned -q; pr /tmp/o/s64w
tm "warm: s64 --max-shift 16 (again)" env $C python3 -m xcorr_app.cli align /tmp/probe/s64.tif --max-shift 16 --out /tmp/o/s64w --force --no-aligned -q; pr /tmp/o/s64w
rm -rf /tmp/c; tm "cold: cell (auto)" env $C python3 -m xcorr_app.cli align sample_data/cell_drift.tif --out /tmp/o/cella --force -q
tm "cpu: cell" python3 -m xcorr_app.cli align sample_data/cell_drift.tif --out /tmp/o/cellcpu --device cpu --force -q
} 2>&1 | tee "$OUT/cold.txt"
timeout 150 python3 -m xcorr_app.cli bench xcorr --only one_to_one > "$OUT/bench_xcorr.txt" 2>&1
timeout 80 python3 -m xcorr_app.cli bench xcorr --only 1x8 >> "$OUT/bench_xcorr.txt" 2>&1
grep -E "^\| one_to|^\| 1x8|cost model vs tuned|^xcorr bench" "$OUT/bench_xcorr.txt" | cut -c1-175
(cd tools && timeout 100 python3 layer_probe.py) 2>&1 | grep -v "^planning" | tee "$OUT/layers.txt"
{
S=/tmp/probe/s512.tif
python3 -m xcorr_app.cli align $S --out /tmp/o/w --force -q --no-aligned >/dev/null 2>&1
python3 -m xcorr_app.cli align $S --max-shift 16 --out /tmp/o/w --force -q --no-aligned >/dev/null 2>&1
for rep in 1 2 3; do
  tm "imread 4 GiB #$rep" python3 -c "import tifffile; tifffile.imread('$S')"
  tm "xcorr align 4 GiB --no-aligned #$rep" python3 -m xcorr_app.cli align $S --out /tmp/o/a --force -q --no-aligned
  tm "xcorr align 4 GiB --max-shift 16 --no-aligned #$rep" python3 -m xcorr_app.cli align $S --max-shift 16 --out /tmp/o/b --force -q --no-aligned
done
pr /tmp/o/a; pr /tmp/o/b
} 2>&1 | tee "$OUT/warm4g.txt"
timeout 150 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 > "$OUT/bench_patches.txt" 2>&1
tail -9 "$OUT/bench_patches.txt"
python3 -c "import cupy; from cupy.cuda import cufft; print('cuFFT', cufft.getVersion(), 'CuPy', cupy.__version__, 'CUDA runtime', cupy.cuda.runtime.runtimeGetVersion())"
lib=$(python3 -c "import cupy, cupy.cuda.cufft, re; print([l.split()[-1] for l in open('/proc/self/maps') if 'libcufft' in l][0])" 2>/dev/null)
echo "libcufft: $lib"; [ -n "$lib" ] && cuobjdump --list-elf "$lib" 2>/dev/null | grep -o "sm_[0-9]*" | sort | uniq -c | head
[ -n "$lib" ] && echo "PTX entries: $(cuobjdump --list-ptx "$lib" 2>/dev/null | wc -l)"
echo "driver JIT cache entries now: $(find ~/.nv/ComputeCache -type f 2>/dev/null | wc -l)"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1; tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED" "$OUT/pytest_gpu.txt" | head
