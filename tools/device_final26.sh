#!/usr/bin/env bash
# The session's last device call (issue 26): the GPU suite and the cold runs
# (tools/device_cold26.sh), then in-process medians with and without verification
# (tools/ab_align.py) on 512 frames of 2048x2048 and 1024x1024, and warm one-shot processes on
# the 4 GiB stack with and without aligned.tif.  Logs under $OUT.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash tools/device_cold26.sh
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c "
from xcorr_app.bench._align_data import SyntheticStack, default_workers
SyntheticStack(512, (2048, 2048), seed=0).write('/tmp/probe/s512.tif', workers=default_workers())
SyntheticStack(512, (1024, 1024), seed=0).write('/tmp/probe/m512.tif', workers=default_workers())"
{
echo "--- in process, median of 3 warm runs (tools/ab_align.py)"
for s in s512 m512; do
  echo "$s:"; python3 tools/ab_align.py /tmp/probe/$s.tif none none,noverify 16 16,noverify
done
tm() {
  local l=$1; shift; local t0=$EPOCHREALTIME
  "$@" >/dev/null 2>>"$OUT/err.txt" || echo "$l FAILED"
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$l" 'BEGIN {printf "%-52s %6.2f s\n", l, b - a}'
}
echo "--- one-shot, warm caches"
export CUPY_CACHE_DIR=/tmp/w/cupy XCORR_CACHE_DIR=/tmp/w/x
python3 -m xcorr_app.cli align /tmp/probe/s512.tif --out /tmp/o/w --force -q >/dev/null 2>&1
python3 -m xcorr_app.cli align /tmp/probe/s512.tif --out /tmp/o/w --force -q --max-shift 16 >/dev/null 2>&1
for rep in 1 2; do
  tm "s512 --no-aligned #$rep" python3 -m xcorr_app.cli align /tmp/probe/s512.tif --out /tmp/o/a --force -q --no-aligned
  tm "s512 --max-shift 16 --no-aligned #$rep" python3 -m xcorr_app.cli align /tmp/probe/s512.tif --max-shift 16 --out /tmp/o/b --force -q --no-aligned
  tm "s512 with aligned.tif #$rep" python3 -m xcorr_app.cli align /tmp/probe/s512.tif --out /tmp/o/c --force -q
done
tm "python: tifffile.imread(s512)" python3 -c "import tifffile; tifffile.imread('/tmp/probe/s512.tif')"
} 2>&1 | tee "$OUT/final26.txt"
