#!/usr/bin/env bash
# Development probe (device): Nsight Compute's full set on one launch of a kernel (default the
# fused refinement, refine_surfaces) in a 256-frame chunk of 512x512 at the patch grids given
# (GRIDS, default "8x8 4x4"): its summary and its SASS in runs (tools/sass_groups.py).  Logs
# under $OUT (the reports themselves in /tmp: the device returns few files).
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
for g in ${GRIDS:-8x8 4x4}; do
  python3 tools/ncu_prep.py 256 $g > /dev/null 2>&1  # (caches)
  timeout 200 ncu --clock-control none -k "regex:${KERNEL:-refine_surfaces}" -s 2 -c 1 --set full \
    --import-source no -f -o "/tmp/ncu_$g" python3 tools/ncu_prep.py 512 $g > /tmp/ncu_run_$g.txt 2>&1
  ncu --import "/tmp/ncu_$g.ncu-rep" --page details > "$OUT/details_$g.txt" 2>&1
  ncu --import "/tmp/ncu_$g.ncu-rep" --page source --csv --print-source sass > /tmp/sass_$g.csv 2>&1
  python3 tools/sass_groups.py /tmp/sass_$g.csv 0.005 > "$OUT/sass_groups_$g.txt" 2>&1
  echo "== $g"; grep -E "^  [a-z].*<|Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache|Achieved Occupancy|Registers Per|Executed Ipc A|Warp Cycles Per Issued|Executed Instructions  " "$OUT/details_$g.txt" | head -12
  cat "$OUT/sass_groups_$g.txt"
done
