#!/usr/bin/env bash
# Development probe (device): Nsight Compute's speed of light, occupancy and warp states of the
# preparation's kernels and the field warp (one launch each, a 256-frame chunk of 512x512) in
# tools/ncu_prep.py's run.  Logs under $OUT.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
python3 tools/ncu_prep.py 256 > /dev/null 2>&1  # (caches)
for k in separable_correlate convert_subtract subtract_frame_means frame_row_stats warp_field \
         refine_surfaces patch_windows sat_columns; do
  timeout 120 ncu --clock-control none -k "regex:$k" -s 2 -c 1 --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section LaunchStats --section MemoryWorkloadAnalysis \
    python3 tools/ncu_prep.py 512 > "$OUT/ncu_$k.txt" 2>&1
  echo "== $k"; grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Block Limit|L1/TEX Hit|L2 Hit|Mem Busy|Max Bandwidth" "$OUT/ncu_$k.txt" | head -24
done
