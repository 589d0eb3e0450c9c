#!/usr/bin/env bash
# Development probe (device): where a warm one-shot `xcorr align --patches 4x4` of 1024 frames
# of 512x512 (the bench's one-shot row) spends its 2 s: the floors (Python, CuPy's CUDA start),
# the wall of the run itself, -X importtime's largest imports, and cProfile's functions.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
python3 - <<'PY'
import tifffile
from xcorr_app.bench._align_patches import make_stack
s, _ = make_stack(1024, (512, 512), seed=0)
tifffile.imwrite("/tmp/stack.tif", s)
PY
args="align /tmp/stack.tif --patches 4x4 --max-shift 14 --max-deviation 4 --no-verify -q --force"
python3 -m xcorr_app.cli $args --out /tmp/o0 --no-aligned  # caches warmed
t() { local s=$EPOCHREALTIME; "$@" > /dev/null 2>&1; awk "BEGIN{printf \"%.3f s: \", $EPOCHREALTIME - $s}"; echo "$*"; }
{ t python3 -c pass; t python3 -c "import numpy, scipy.ndimage, tifffile"
  t python3 -c "import cupy; cupy.cuda.Device(0).synchronize()"
  t python3 -c "import cupy; cupy.zeros(1).sum().get()"
  t python3 -c "import xcorr_app.cli"
  for k in 1 2 3; do t python3 -m xcorr_app.cli $args --out /tmp/o1 --no-aligned; done
  for k in 1 2; do t python3 -m xcorr_app.cli $args --out /tmp/o2; done; } 2>&1 | tee "$OUT/floors.txt"
python3 -X importtime -m xcorr_app.cli $args --out /tmp/o3 --no-aligned 2> "$OUT/importtime.txt"
sort -t'|' -k2 -n -r "$OUT/importtime.txt" | head -25
python3 -m cProfile -o /tmp/one.prof -m xcorr_app.cli $args --out /tmp/o4
python3 - <<'PY' > "$OUT/oneshot_profile.txt" 2>&1
import pstats
p = pstats.Stats("/tmp/one.prof")
p.sort_stats("cumulative").print_stats(60)
p.sort_stats("tottime").print_stats(30)
PY
head -110 "$OUT/oneshot_profile.txt" | tail -95 | cut -c1-150
