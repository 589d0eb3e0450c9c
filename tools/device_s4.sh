#!/usr/bin/env bash
# Session of 2026-11-23 (issue 26): cold and warm one-shot runs with the kernels that ship built
# (xcorr_app/_cuda/built, carried or built here with nvcc: the "installed package"), their
# NVRTC compilations logged, warm one-shot runs of the 4 GiB stack against a one-shot read,
# then (SUITE=1) the GPU suite.  Logs under $OUT.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1 && export PYTHONPATH=/tmp/site:$PWD
python3 -m compileall -q xcorr_app tools >/dev/null 2>&1  # what pip does at install
if [ ! -f xcorr_app/_cuda/built/index.json ]; then
  t=$EPOCHREALTIME; python3 -m xcorr_app._cuda.compile_check --keep 2>&1 | tail -4
  awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN {printf "built the shipped kernels in %.1f s\n", b - a}'
fi
du -sh xcorr_app/_cuda/built
mkdir -p /tmp/probe
python3 -c "
from xcorr_app.bench._align_data import SyntheticStack, default_workers
SyntheticStack(64, (2048, 2048), seed=0).write('/tmp/probe/s64.tif', workers=default_workers())
SyntheticStack(512, (2048, 2048), seed=0).write('/tmp/probe/s512.tif', workers=default_workers())"
tm() {  # label, command...
  local l=$1; shift; local t0=$EPOCHREALTIME
  "$@" >/dev/null 2>>"$OUT/err.txt" || echo "$l FAILED"
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$l" 'BEGIN {printf "%-52s %6.2f s\n", l, b - a}'
}
C="CUPY_CACHE_DIR=/tmp/c/cupy XCORR_CACHE_DIR=/tmp/c/x"
S=/tmp/probe/s512.tif
P=${PROF_DIR:-/tmp}  # the profiles: $OUT with PROF_DIR=$OUT
{
rm -rf /tmp/c; tm "cold: cell (auto)" env $C python3 -m xcorr_app.cli align sample_data/cell_drift.tif --out /tmp/o/cella --force -q
rm -rf /tmp/c; tm "cold: cell --device gpu" env $C python3 tools/compile_log.py $OUT/compiles_cell.txt /tmp/p1.txt align sample_data/cell_drift.tif --device gpu --out /tmp/o/cell --force -q
tm "warm: cell --device gpu" env $C python3 -m xcorr_app.cli align sample_data/cell_drift.tif --device gpu --out /tmp/o/cellw --force -q
tm "cpu: cell" python3 -m xcorr_app.cli align sample_data/cell_drift.tif --out /tmp/o/cellcpu --device cpu --force -q
rm -rf /tmp/c; tm "cold: s64 --max-shift 16" env $C python3 tools/compile_log.py $OUT/compiles_s64.txt $P/prof_s64.txt align /tmp/probe/s64.tif --max-shift 16 --out /tmp/o/s64 --force --no-aligned -q
tm "warm: s64 --max-shift 16" env $C python3 -m xcorr_app.cli align /tmp/probe/s64.tif --max-shift 16 --out /tmp/o/s64w --force --no-aligned -q
rm -rf /tmp/c; tm "cold: s64 unbounded" env $C python3 tools/compile_log.py $OUT/compiles_s64u.txt /tmp/p3.txt align /tmp/probe/s64.tif --out /tmp/o/s64u --force --no-aligned -q
tm "warm: s64 unbounded" env $C python3 -m xcorr_app.cli align /tmp/probe/s64.tif --out /tmp/o/s64uw --force --no-aligned -q
for d in cella cell cellw s64 s64w s64u s64uw; do python3 -c "import json; d=json.load(open('/tmp/o/$d/shifts.json')); print('$d printed', d['frames_per_second'], 'frames/s,', d['seconds_measuring'], 's measuring')"; done
tm "one-shot tifffile.imread(s512)" python3 -c "import tifffile; tifffile.imread('$S')"
for rep in 1 2; do
  tm "warm: s512 --no-aligned #$rep" env $C python3 -m xcorr_app.cli align $S --out /tmp/o/a --force -q --no-aligned
  tm "warm: s512 --max-shift 16 --no-aligned #$rep" env $C python3 -m xcorr_app.cli align $S --max-shift 16 --out /tmp/o/b --force -q --no-aligned
done
tm "one-shot tifffile.imread(s512)" python3 -c "import tifffile; tifffile.imread('$S')"
tm "warm: s512 with aligned.tif" env $C python3 -m xcorr_app.cli align $S --out /tmp/o/c --force -q
env $C python3 tools/compile_log.py $OUT/compiles_warm512.txt $P/prof_warm512.txt align $S --max-shift 16 --out /tmp/o/h --force --no-aligned | tail -3
} 2>&1 | tee "$OUT/s4.txt"
if [ "${SUITE:-0}" = 1 ]; then
  XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout ${SUITE_T:-400} python3 -m pytest -m gpu -q -p no:cacheprovider \
    -n 8 --maxfail=30 ${SUITE_ARGS:-} > "$OUT/pytest_gpu.txt" 2>&1; tail -3 "$OUT/pytest_gpu.txt"
fi
