#!/usr/bin/env bash
# Development probe (device): Nsight Compute's full set on one launch of the fused refinement
# (refine_surfaces, a 256-frame chunk of 512x512) at the patch grids given (default 8x8 4x4),
# with its hottest SASS lines.  Logs under $OUT.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
for g in ${GRIDS:-8x8 4x4}; do
  python3 tools/ncu_prep.py 256 $g > /dev/null 2>&1  # (caches)
  timeout 200 ncu --clock-control none -k "regex:${KERNEL:-refine_surfaces}" -s 2 -c 1 --set full \
    --import-source no -o "$OUT/refine_$g" python3 tools/ncu_prep.py 512 $g > "$OUT/ncu_run_$g.txt" 2>&1
  ncu --import "$OUT/refine_$g.ncu-rep" --page details > "$OUT/details_$g.txt" 2>&1
  ncu --import "$OUT/refine_$g.ncu-rep" --page source --csv --print-source sass \
    > "$OUT/sass_$g.csv" 2>"$OUT/sass_$g.err"
  echo "== $g"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Executed Ipc A|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  |L1/TEX Hit|L2 Hit|Block Limit Reg|Block Limit Shared|Dynamic Shared|Static Shared" "$OUT/details_$g.txt" | head -24
  grep -iE "stall|cycles" "$OUT/details_$g.txt" | grep -iE "^ *  (One|On average|The)" | head -6
done
