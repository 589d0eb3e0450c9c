#!/usr/bin/env bash
# Development probe (device): Nsight Compute's per-instruction counts (SASS, source page) of one
# launch of the refinement (refine_surfaces) in a GPU-resident --patches 4x4 run of 256 frames:
# where its instructions go (issue 27).  Writes $OUT/refine_sass.csv and prints a summary.
set -u
OUT=${OUT:-/tmp/out}
ncu --clock-control none -k "regex:refine_surfaces" -s 1 -c 1 --section SourceCounters \
  --section InstructionStats -o "$OUT/refine" -f python3 -c "
import cupy as cp
from xcorr_app.alignment._api import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack
s, _ = make_stack(256, (512, 512), seed=0)
align(cp.asarray(s), max_shift=MAX_SHIFT, device='gpu', verify=False, patches=(4, 4),
      max_deviation=MAX_DEVIATION, lucas_kanade='off')
" > "$OUT/ncu_log.txt" 2>&1
tail -3 "$OUT/ncu_log.txt"
ncu --import "$OUT/refine.ncu-rep" --page source --print-source sass --csv > "$OUT/refine_sass.csv" 2>&1
head -3 "$OUT/refine_sass.csv" | cut -c1-400
python3 - "$OUT/refine_sass.csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next(i for i, r in enumerate(rows) if any("Instructions Executed" in c for c in r))
h = rows[hdr]
ci = next(i for i, c in enumerate(h) if c.strip() == "Instructions Executed")
ca = next(i for i, c in enumerate(h) if c.strip() in ("Address", "# Address"))
cs = next(i for i, c in enumerate(h) if c.strip() == "Source")
body = [r for r in rows[hdr + 1:] if len(r) > max(ci, cs)]
tot = sum(float(r[ci] or 0) for r in body)
print(f"total warp instructions {tot:.4g}")
# runs of hot instructions: print every instruction with >= 0.2% of the total
for r in body:
    v = float(r[ci] or 0)
    if v >= 0.002 * tot:
        print(f"{r[ca]:>8} {v / tot * 100:6.2f}%  {r[cs][:80]}")
PY
