#!/usr/bin/env bash
# Session of 2026-11-25 (2), issue 27: where the 8x8 GPU-resident run spends its time now
# (patch_timeline with out=), and Nsight Compute's full set on one launch each of the
# refinement, the patch search, the windows' tables and the FFT's pad at 8x8.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/device.txt"
timeout 150 python3 tools/patch_timeline.py 4096 out 8x8 > "$OUT/timeline_8x8.txt" 2>&1
head -70 "$OUT/timeline_8x8.txt"
python3 tools/ncu_prep.py 256 8x8 > /dev/null 2>&1  # (caches)
for k in refine_surfaces band_xcorr patch_windows_tables fft_pad; do
  timeout 100 ncu --clock-control none -k "regex:$k" -s 2 -c 1 --set full \
    --import-source no -f -o "/tmp/ncu_$k" python3 tools/ncu_prep.py 512 8x8 > /tmp/ncu_run_$k.txt 2>&1
  ncu --import "/tmp/ncu_$k.ncu-rep" --page details > "$OUT/details_$k.txt" 2>&1
  ncu --import "/tmp/ncu_$k.ncu-rep" --page source --csv --print-source sass > /tmp/sass_$k.csv 2>&1
  python3 tools/sass_groups.py /tmp/sass_$k.csv 0.01 > "$OUT/sass_groups_$k.txt" 2>&1
  echo "== $k"; grep -E "^  [a-z].*<|Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Th|DRAM Through|Achieved Occupancy|Registers Per|Executed Ipc A|Warp Cycles Per Issued|Executed Instructions  " "$OUT/details_$k.txt" | head -14
  head -30 "$OUT/sass_groups_$k.txt"
done
