#!/usr/bin/env bash
# Sourced by the device scripts: one-shot `xcorr align` of the three samples, cold (empty CuPy
# and tuning caches) then warm, for this tree (`new`) and, when .old/ holds one, an earlier tree
# (`old`), with wall times and a byte comparison of their shifts.csv.  Needs $OUT.
samples() {  # $1: label, $2: PYTHONPATH root
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
samples_cold_warm() {
  samples new "$PWD"
  if [ -d .old ]; then
    samples old "$PWD/.old"
    for s in cell hubble moon; do
      cmp -s /tmp/samples-new-cold/$s/shifts.csv /tmp/samples-old-cold/$s/shifts.csv \
        && echo "$s shifts.csv identical (old and new tree, GPU)" || echo "$s shifts.csv DIFFERS"
    done
  fi
}
