#!/usr/bin/env bash
# Session of 2026-11-25 (2), issue 27: the 8x8 run's idle gaps and what the host did in them
# (gap_timeline.py), its host profile (patch_timeline.py's cProfile part), Nsight Compute on
# the patch search and the windows' tables.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 150 python3 tools/gap_timeline.py 4096 8x8 > "$OUT/gaps_8x8.txt" 2>&1
head -60 "$OUT/gaps_8x8.txt"
timeout 150 python3 tools/patch_timeline.py 4096 out 8x8 > "$OUT/timeline_8x8.txt" 2>&1
python3 tools/ncu_prep.py 256 8x8 > /dev/null 2>&1  # (caches)
for k in band_xcorr patch_windows_tables; do
  timeout 100 ncu --clock-control none -k "regex:$k" -s 1 -c 1 --set full \
    --import-source no -f -o "/tmp/ncu_$k" python3 tools/ncu_prep.py 512 8x8 > /tmp/ncu_run_$k.txt 2>&1
  ncu --import "/tmp/ncu_$k.ncu-rep" --page details > "$OUT/details_$k.txt" 2>&1
  echo "== $k"; grep -E "^  [a-z].*<|Duration|Compute \(SM\) Throughput|Memory Throughput|L1/TEX Cache Th|DRAM Through|Achieved Occupancy|Registers Per|Executed Ipc A|Warp Cycles Per Issued|Executed Instructions  " "$OUT/details_$k.txt" | head -14
done
