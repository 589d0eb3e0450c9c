#!/usr/bin/env bash
# Session of 2026-11-23 (second), the final call: the compiled launch path built in place, the
# shipped kernels built, the GPU suite, and the matching benches in the same call (xcorr bench
# xcorr's pipeline rows, the --patches bench).  Logs under $OUT.
. tools/device_env.sh
python3 -m xcorr_app.cli info 2>&1 | grep -E "compiled launch|shipped built"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1; tail -2 "$OUT/pytest_gpu.txt"
timeout 130 python3 -m xcorr_app.cli bench xcorr --only one_to_one > "$OUT/bench_xcorr.txt" 2>&1
timeout 50 python3 -m xcorr_app.cli bench xcorr --only 1x8 >> "$OUT/bench_xcorr.txt" 2>&1
grep -E "^\| one_to|^\| one_to_many 1x8|cost model vs tuned" "$OUT/bench_xcorr.txt" | cut -c1-200
timeout 120 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 1024 --size 512x512 > "$OUT/bench_patches.txt" 2>&1
tail -9 "$OUT/bench_patches.txt"
