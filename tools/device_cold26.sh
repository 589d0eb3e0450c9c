#!/usr/bin/env bash
# Issue 26's cold-start call (device): the GPU suite, then cold one-shot runs with their NVRTC
# compilations logged (tools/compile_log.py): the cell sample, and 64 frames of 2048x2048 with
# --max-shift 16; then the same warm, and the CPU run of the cell sample.  Logs under $OUT.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 && export PYTHONPATH=/tmp/site:$PWD
if [ "${SKIP_SUITE:-0}" != 1 ]; then
  XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 420 python3 -m pytest -m gpu -q -p no:cacheprovider \
    -n 8 --maxfail=20 ${SUITE_ARGS:-} > "$OUT/pytest_gpu.txt" 2>&1; tail -3 "$OUT/pytest_gpu.txt"
fi
mkdir -p /tmp/probe
python3 -c "
from xcorr_app.bench._align_data import SyntheticStack, default_workers
SyntheticStack(64, (2048, 2048), seed=0).write('/tmp/probe/s64.tif', workers=default_workers())"
tm() {  # label, command...
  local l=$1; shift; local t0=$EPOCHREALTIME
  "$@" >/dev/null 2>>"$OUT/err.txt" || echo "$l FAILED"
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$l" 'BEGIN {printf "%-50s %6.2f s\n", l, b - a}'
}
C="CUPY_CACHE_DIR=/tmp/c/cupy XCORR_CACHE_DIR=/tmp/c/x"
{
rm -rf /tmp/c; tm "cold: cell (auto)" env $C python3 -m xcorr_app.cli align sample_data/cell_drift.tif --out /tmp/o/cella --force -q
tm "cold: cell --device gpu" env $C python3 tools/compile_log.py $OUT/compiles_cell.txt /tmp/p1.txt align sample_data/cell_drift.tif --device gpu --out /tmp/o/cell --force -q
sleep 8; cat /tmp/c/x/prebuilt/*.log > $OUT/helper_logs.txt 2>/dev/null; ls /tmp/c/x/prebuilt | head -20
tm "warm: cell (auto)" env $C python3 -m xcorr_app.cli align sample_data/cell_drift.tif --out /tmp/o/cella --force -q
tm "warm: cell --device gpu" env $C python3 -m xcorr_app.cli align sample_data/cell_drift.tif --device gpu --out /tmp/o/cell --force -q
tm "cpu: cell" python3 -m xcorr_app.cli align sample_data/cell_drift.tif --out /tmp/o/cellcpu --device cpu --force -q
rm -rf /tmp/c; tm "cold: s64 --max-shift 16" env $C python3 tools/compile_log.py $OUT/compiles_s64.txt /tmp/p2.txt align /tmp/probe/s64.tif --max-shift 16 --out /tmp/o/s64 --force --no-aligned -q
tm "warm: s64 --max-shift 16" env $C python3 -m xcorr_app.cli align /tmp/probe/s64.tif --max-shift 16 --out /tmp/o/s64w --force --no-aligned -q
for d in cella cell s64 s64w; do python3 -c "import json; d=json.load(open('/tmp/o/$d/shifts.json')); print('$d printed', d['frames_per_second'], 'frames/s,', d['seconds_measuring'], 's measuring')"; done
rm -rf /tmp/c /tmp/cl; mkdir -p /tmp/cl
tm "cold: cell --device gpu (timeline)" env $C XCORR_COMPILE_LOG_DIR=/tmp/cl PYTHONPATH=$PWD/tools/compile_trace:$PYTHONPATH python3 -m xcorr_app.cli align sample_data/cell_drift.tif --device gpu --out /tmp/o/cellt --force -q
sleep 5
} 2>&1 | tee "$OUT/cold26.txt"
cat /tmp/cl/compiles-*.txt | sort -n | awk 'NR==1 {t0=$1} {printf "%7.3f %s\n", $1 - t0, substr($0, index($0, " ") + 1)}' > "$OUT/compile_timeline.txt"
head -1 $OUT/compiles_*.txt
if [ "${PLANS:-0}" = 1 ]; then
  timeout 100 python3 tools/dispatch_probe.py plan > "$OUT/plans.txt" 2>&1; tail -30 "$OUT/plans.txt"
  timeout 200 python3 -m xcorr_app.cli bench xcorr --only one_to_one > "$OUT/bench_plans.txt" 2>&1
  timeout 100 python3 -m xcorr_app.cli bench xcorr --only 1x8 >> "$OUT/bench_plans.txt" 2>&1; tail -40 "$OUT/bench_plans.txt"
fi
