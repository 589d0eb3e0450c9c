#!/usr/bin/env bash
# Development call (issue 26): where a warm one-shot 4 GiB `xcorr align` spends its wall time,
# thread by thread (tools/wall_sampler.py), beside one-shot plain reads; logs under $OUT.
. tools/device_env.sh
mkdir -p /tmp/probe
t0=$EPOCHREALTIME
python3 -c "
from xcorr_app.bench._align_data import SyntheticStack, default_workers
SyntheticStack(512, (2048, 2048), seed=0).write('/tmp/probe/s512.tif', workers=default_workers())"
awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "stack written in %.1f s\n", b - a}'
S=/tmp/probe/s512.tif
tm() { local l=$1; shift; echo "=== $l" >> "$OUT/wall_log.txt"; local t0=$EPOCHREALTIME; "$@" >/dev/null 2>>"$OUT/wall_log.txt"
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$l" 'BEGIN {printf "| %-44s wall %5.2f s\n", l, b - a}'; }
if [ "${SUITE:-0}" = 1 ]; then
  XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider \
    -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1; tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED" "$OUT/pytest_gpu.txt" | head
fi
python3 -m xcorr_app.cli align $S --out /tmp/o/w --force -q --no-aligned >/dev/null 2>&1  # warm-up
python3 -m xcorr_app.cli align $S --max-shift 16 --out /tmp/o/w --force -q --no-aligned >/dev/null 2>&1
{
for rep in 1 2 3; do
  tm "imread #$rep" python3 -c "import tifffile; tifffile.imread('$S')"
  tm "xcorr align --no-aligned #$rep" python3 -m xcorr_app.cli align $S --out /tmp/o/a --force -q --no-aligned
  tm "xcorr align --max-shift 16 --no-aligned #$rep" python3 -m xcorr_app.cli align $S --max-shift 16 --out /tmp/o/b --force -q --no-aligned
  tm "sampled --no-aligned #$rep" python3 tools/wall_sampler.py align $S --out /tmp/o/c --force -q --no-aligned
  tm "sampled --max-shift 16 #$rep" python3 tools/wall_sampler.py align $S --max-shift 16 --out /tmp/o/d --force -q --no-aligned
  tm "exit_probe --max-shift 16 (normal exit) #$rep" python3 tools/exit_probe.py align $S --max-shift 16 --out /tmp/o/e --force -q --no-aligned
  tm "exit_probe --max-shift 16 (os._exit) #$rep" python3 tools/exit_probe.py fast align $S --max-shift 16 --out /tmp/o/f --force -q --no-aligned
done
python3 -c "import json; d=json.load(open('/tmp/o/b/shifts.json')); print('ms16 printed', d['frames_per_second'], d['seconds_measuring'], d['summary']['plan'])"
} 2>&1 | tee "$OUT/wall26.txt"
