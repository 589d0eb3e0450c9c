#!/usr/bin/env bash
# Where a first run's time goes on a fresh machine: cProfile of one cold `xcorr align` of the
# cell sample (empty CuPy and tuning caches), the top functions by cumulative and own time.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
rm -rf /tmp/cold-cupy /tmp/cold-xcorr
CUPY_CACHE_DIR=/tmp/cold-cupy XCORR_CACHE_DIR=/tmp/cold-xcorr python3 -m cProfile -o /tmp/cold.prof \
  -m xcorr_app.cli align sample_data/cell_drift.tif --out /tmp/cold-out --force -q
python3 - <<'PY' > "$OUT/cold_profile.txt" 2>&1
import pstats
p = pstats.Stats("/tmp/cold.prof")
p.sort_stats("cumulative").print_stats(45)
p.sort_stats("tottime").print_stats(25)
PY
ls /tmp/cold-cupy | wc -l > "$OUT/cold_cupy_entries.txt"
