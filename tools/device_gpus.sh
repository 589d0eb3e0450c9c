#!/usr/bin/env bash
# Several GPUs from the command line (device with 2+ GPUs): warm one-shot `xcorr align` of a
# 4 GiB and a 12 GiB stack (2048x2048 uint16) on one GPU, `--gpus all` and `--workers 2`
# (Dask), unbounded and --max-shift 16, wall times.  Logs under $OUT.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export CUPY_CACHE_DIR=/tmp/g/cupy XCORR_CACHE_DIR=/tmp/g/x
mkdir -p /tmp/probe
python3 -c "
from xcorr_app.bench._align_data import SyntheticStack, default_workers
SyntheticStack(512, (2048, 2048), seed=0).write('/tmp/probe/s512.tif', workers=default_workers())
SyntheticStack(${BIG:-1536}, (2048, 2048), seed=1).write('/tmp/probe/big.tif', workers=default_workers())"
nvidia-smi --query-gpu=name --format=csv,noheader
tm() {  # label, command...
  local l=$1; shift; local t0=$EPOCHREALTIME
  "$@" >/dev/null 2>>"$OUT/err.txt" || echo "$l FAILED"
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$l" 'BEGIN {printf "%-52s %6.2f s\n", l, b - a}'
}
A="python3 -m xcorr_app.cli align"
{
for s in s512 big; do cat /tmp/probe/$s.tif > /dev/null; done
# warm-up: kernels of every variant built on both GPUs
$A /tmp/probe/s512.tif --out /tmp/o/w --force -q --no-aligned --gpus all >/dev/null 2>&1
$A /tmp/probe/s512.tif --out /tmp/o/w --force -q --no-aligned --gpus all --max-shift 16 >/dev/null 2>&1
for s in s512 big; do
  for ms in "" "--max-shift 16"; do
    for rep in 1 2; do
      tm "$s $ms: one GPU #$rep" $A /tmp/probe/$s.tif --out /tmp/o/a --force -q --no-aligned $ms
      tm "$s $ms: --gpus all #$rep" $A /tmp/probe/$s.tif --out /tmp/o/b --force -q --no-aligned --gpus all $ms
    done
  done
  tm "$s: --workers 2" $A /tmp/probe/$s.tif --out /tmp/o/c --force -q --no-aligned --workers 2
done
tm "read s512 (python tifffile.imread)" python3 -c "import tifffile; tifffile.imread('/tmp/probe/s512.tif')"
} 2>&1 | tee "$OUT/gpus.txt"
tail -20 "$OUT/err.txt" 2>/dev/null
