#!/usr/bin/env bash
# Session of 2026-11-23 (second): a warm one-shot 4 GiB run's wall time outside the measuring
# (tools/exit_probe.py: imports, the CLI, the teardown at exit) against a one-shot read.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m compileall -q xcorr_app tools >/dev/null 2>&1
[ -f xcorr_app/_cuda/built/index.json ] || python3 -m xcorr_app._cuda.compile_check --keep 2>&1 | tail -1
mkdir -p /tmp/probe
python3 -c "
from xcorr_app.bench._align_data import SyntheticStack, default_workers
SyntheticStack(512, (2048, 2048), seed=0).write('/tmp/probe/s512.tif', workers=default_workers())"
S=/tmp/probe/s512.tif
tm() { local l=$1; shift; local t0=$EPOCHREALTIME; "$@" >/dev/null 2>/tmp/err.txt; cat /tmp/err.txt | grep exit_probe | tr '\n' ' '
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$l" 'BEGIN {printf "| %-40s wall %5.2f s\n", l, b - a}'; }
{
python3 -m xcorr_app.cli align $S --out /tmp/o/w --force -q --no-aligned  # warm-up: caches, page cache
python3 -m xcorr_app.cli align $S --max-shift 16 --out /tmp/o/w --force -q --no-aligned
for rep in 1 2 3; do
  tm "imread #$rep" python3 -c "import tifffile; tifffile.imread('$S')"
  tm "align --no-aligned #$rep" python3 tools/exit_probe.py align $S --out /tmp/o/a --force -q --no-aligned
  tm "align --no-aligned, os._exit #$rep" python3 tools/exit_probe.py fast align $S --out /tmp/o/a --force -q --no-aligned
  tm "align --max-shift 16 #$rep" python3 tools/exit_probe.py align $S --max-shift 16 --out /tmp/o/b --force -q --no-aligned
  tm "align --max-shift 16, os._exit #$rep" python3 tools/exit_probe.py fast align $S --max-shift 16 --out /tmp/o/b --force -q --no-aligned
done
tm "import xcorr_app.cli._main" python3 -c "import xcorr_app.cli._main"
tm "import cupy + device count" python3 -c "import cupy; cupy.cuda.runtime.getDeviceCount()"
python3 -c "import json; d=json.load(open('/tmp/o/b/shifts.json')); print('ms16 printed', d['frames_per_second'], d['seconds_measuring'], d['summary']['plan'])"
} 2>&1 | tee "$OUT/s5c.txt"
