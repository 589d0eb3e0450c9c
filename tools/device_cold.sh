#!/usr/bin/env bash
# Cold and warm one-shot runs of the samples (this tree, and .old/ when present), the GPU
# suite, and a profile of one cold run; logs under $OUT.
set -u -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
samples() {  # $1: label, $2: tree
  local root=$2 cache=/tmp/cache-$1 top=$PWD
  for s in cell hubble moon; do
    for run in cold warm; do
      [ $run = cold ] && rm -rf "$cache"
      local t0=$EPOCHREALTIME
      (cd "$root" && CUPY_CACHE_DIR=$cache/cupy XCORR_CACHE_DIR=$cache/xcorr \
        PYTHONPATH=/tmp/site:$root python3 -m xcorr_app.cli align "$top/sample_data/${s}_drift.tif" \
        --out /tmp/samples-$1-$run/$s --force -q) >/dev/null 2>>"$OUT/samples_err.txt" || echo "$1 $s $run FAILED"
      awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$1 $s $run" 'BEGIN {printf "%-20s %6.2f s\n", l, b - a}'
    done
  done
}
{ samples new "$PWD"; [ -d .old ] && samples old "$PWD/.old"
  for s in cell hubble moon; do
    cmp -s /tmp/samples-new-cold/$s/shifts.csv /tmp/samples-old-cold/$s/shifts.csv \
      && echo "$s shifts.csv identical (old and new tree, GPU)" || echo "$s shifts.csv DIFFERS"
  done; } 2>&1 | tee "$OUT/samples.txt"
bash tools/cold_profile.sh; grep -m3 "function calls\|compileProgram" "$OUT/cold_profile.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 \
  > "$OUT/pytest_gpu.txt" 2>&1; tail -3 "$OUT/pytest_gpu.txt"
