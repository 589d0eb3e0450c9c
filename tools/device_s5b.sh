#!/usr/bin/env bash
# Session of 2026-11-23 (second): cold (empty CuPy, xcorr and CUDA driver caches) and warm
# one-shot runs of 64 frames of 2048^2 with --max-shift 16, with the cuFFT plans made ahead
# (XCORR_FFT_WARM=1, default) and without (0); SUITE=1: the GPU suite after.  Logs under $OUT.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m compileall -q xcorr_app tools >/dev/null 2>&1  # what pip does at install
[ -f xcorr_app/_cuda/built/index.json ] || python3 -m xcorr_app._cuda.compile_check --keep 2>&1 | tail -1
mkdir -p /tmp/probe
[ -f /tmp/probe/s64.tif ] || python3 -c "
from xcorr_app.bench._align_data import SyntheticStack, default_workers
SyntheticStack(64, (2048, 2048), seed=0).write('/tmp/probe/s64.tif', workers=default_workers())"
C="CUPY_CACHE_DIR=/tmp/c/cupy XCORR_CACHE_DIR=/tmp/c/x CUDA_CACHE_PATH=/tmp/c/nv"
run() {  # label, env..., then xcorr args
  local l=$1; shift; local t0=$EPOCHREALTIME
  local d=/tmp; case $l in cold1|warm1) d=$OUT;; esac  # a few logs back (8 files at most)
  env $C "$@" python3 tools/compile_log.py $d/compiles_$l.txt $d/prof_$l.txt align /tmp/probe/s64.tif --max-shift 16 --out /tmp/o/$l --force --no-aligned -q
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$l" 'BEGIN {printf "%-14s wall %5.2f s  ", l, b - a}'
  python3 -c "import json; d=json.load(open('/tmp/o/$l/shifts.json')); s=d['summary']; print('printed', d['frames_per_second'], 'frames/s,', d['seconds_measuring'], 's measuring; plan', s.get('plan'), '; rms vs fft', s.get('rms_vs_fft'))"
}
{
for rep in 1 2; do
  rm -rf /tmp/c; run cold$rep; run warm$rep
  rm -rf /tmp/c; run cold_nowarm$rep XCORR_FFT_WARM=0
done
python3 -c "
import json
for l in ('cold1', 'warm1'):
    d = json.load(open(f'/tmp/o/{l}/shifts.json'))
    print(l, d['summary'].get('plan'), d['summary'].get('notes'))"
if [ "${BIG:-0}" = 1 ]; then  # warm one-shot runs of 512 frames (4 GiB) against a one-shot read
  python3 -c "
from xcorr_app.bench._align_data import SyntheticStack, default_workers
SyntheticStack(512, (2048, 2048), seed=0).write('/tmp/probe/s512.tif', workers=default_workers())"
  for rep in 1 2; do
    t0=$EPOCHREALTIME; python3 -c "import tifffile; tifffile.imread('/tmp/probe/s512.tif')"
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "one-shot tifffile.imread(s512) %5.2f s\n", b - a}'
    for ms in "" "--max-shift 16"; do
      if [ $rep = 1 ]; then cmd="python3 -m xcorr_app.cli"; else cmd="python3 tools/compile_log.py /tmp/c512.txt $OUT/prof_s512${ms:+ms}.txt"; fi
      t0=$EPOCHREALTIME; env $C $cmd align /tmp/probe/s512.tif $ms --out /tmp/o/big --force --no-aligned -q
      awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="s512 $ms #$rep" 'BEGIN {printf "warm %-26s wall %5.2f s  ", l, b - a}'
      python3 -c "import json; d=json.load(open('/tmp/o/big/shifts.json')); print('printed', d['frames_per_second'], 'frames/s,', d['seconds_measuring'], 's measuring; plan', d['summary'].get('plan'))"
    done
  done
fi
} 2>&1 | tee "$OUT/s5b.txt"
if [ "${SUITE:-0}" = 1 ]; then
  XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout ${SUITE_T:-400} python3 -m pytest -m gpu -q -p no:cacheprovider \
    -n 8 --maxfail=30 ${SUITE_ARGS:-} > "$OUT/pytest_gpu.txt" 2>&1; tail -3 "$OUT/pytest_gpu.txt"
fi
