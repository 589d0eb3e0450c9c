#!/usr/bin/env bash
# Where a one-shot `xcorr align` process's time goes on the bench's stacks (device): the floors
# (reading the file, importing, a CUDA context), a warm run's profile and imports, and a cold
# bounded run's compilations (tools/compile_log.py).  Logs under $OUT.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
S512=/tmp/probe/s512.tif S64=/tmp/probe/s64.tif
mkdir -p /tmp/probe
python3 - <<'PY'
from xcorr_app.bench._align_data import SyntheticStack, default_workers
import time
for n, p in ((64, "/tmp/probe/s64.tif"), (512, "/tmp/probe/s512.tif")):
    t = time.perf_counter(); SyntheticStack(n, (2048, 2048), seed=0).write(p, workers=default_workers())
    print(f"wrote {p} in {time.perf_counter() - t:.1f} s")
PY
tm() {  # label, command...
  local l=$1; shift; local t0=$EPOCHREALTIME
  "$@" >/dev/null 2>>"$OUT/probe_err.txt" || echo "$l FAILED"
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$l" 'BEGIN {printf "%-58s %6.3f s\n", l, b - a}'
}
W="CUPY_CACHE_DIR=/tmp/warm/cupy XCORR_CACHE_DIR=/tmp/warm/x"
{
tm "cat s512 > /dev/null" cat $S512
tm "python: tifffile.imread(s512)" python3 -c "import tifffile; tifffile.imread('$S512')"
tm "python: import cupy, context, tifffile.imread" python3 -c "import cupy; cupy.zeros(1); import tifffile; tifffile.imread('$S512')"
tm "python: import cupy + context" python3 -c "import cupy; cupy.zeros(1)"
tm "python: import xcorr_app.cli._align" python3 -c "import xcorr_app.cli._align"
tm "xcorr --help" python3 -m xcorr_app.cli --help
for i in 1 2; do
  tm "cold/warm-up #$i: align s512 --no-aligned" env $W python3 -m xcorr_app.cli align $S512 --out /tmp/o/a --force -q --no-aligned
  tm "warm-up #$i: align s512 --max-shift 16 --no-aligned" env $W python3 -m xcorr_app.cli align $S512 --max-shift 16 --out /tmp/o/b --force -q --no-aligned
done
tm "warm: align s512 --no-aligned --no-verify" env $W python3 -m xcorr_app.cli align $S512 --no-verify --out /tmp/o/c --force -q --no-aligned
tm "warm: align s512 --max-shift 16 --no-verify --no-aligned" env $W python3 -m xcorr_app.cli align $S512 --max-shift 16 --no-verify --out /tmp/o/c --force -q --no-aligned
tm "warm: align s512 (aligned.tif written)" env $W python3 -m xcorr_app.cli align $S512 --out /tmp/o/d --force -q
tm "warm: align s64 --max-shift 16" env $W python3 -m xcorr_app.cli align $S64 --max-shift 16 --out /tmp/o/e --force -q --no-aligned
rm -rf /tmp/cold; 
tm "COLD: align s64 --max-shift 16 (profiled)" env CUPY_CACHE_DIR=/tmp/cold/cupy XCORR_CACHE_DIR=/tmp/cold/x python3 tools/compile_log.py $OUT/compiles_cold64.txt $OUT/prof_cold64.txt align $S64 --max-shift 16 --out /tmp/o/f --force --no-aligned
rm -rf /tmp/coldc; tm "COLD: align cell sample (profiled)" env CUPY_CACHE_DIR=/tmp/coldc/cupy XCORR_CACHE_DIR=/tmp/coldc/x python3 tools/compile_log.py $OUT/compiles_cell.txt /tmp/prof_cell.txt align sample_data/cell_drift.tif --out /tmp/o/cell --force
tm "CPU: align cell sample" python3 -m xcorr_app.cli align sample_data/cell_drift.tif --device cpu --out /tmp/o/cellcpu --force -q
} 2>&1 | tee "$OUT/oneshot_probe.txt"
grep -h "frames/s" /tmp/o/*/shifts.json >/dev/null 2>&1
for d in a b c d e f; do python3 -c "import json,sys; d=json.load(open('/tmp/o/$d/shifts.json')); print('$d', d['frames_per_second'], d['seconds_measuring'])" 2>/dev/null; done | tee -a "$OUT/oneshot_probe.txt"
env $W python3 -X importtime -m xcorr_app.cli align $S512 --max-shift 16 --out /tmp/o/g --force -q --no-aligned 2> /tmp/imp.txt
sort -t'|' -k2 -n -r /tmp/imp.txt | head -40 > "$OUT/importtime.txt"
env $W python3 tools/compile_log.py $OUT/compiles_warm512.txt $OUT/prof_warm512.txt align $S512 --max-shift 16 --out /tmp/o/h --force --no-aligned | tail -5 | tee -a "$OUT/oneshot_probe.txt"
