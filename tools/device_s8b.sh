#!/usr/bin/env bash
# Session 8 (issue 27): the fused refinement kernel: its GPU tests and those of the patch pass,
# the GPU-resident timeline, the --patches bench (4096 frames of 512x512).
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 200 python3 -m pytest -m gpu -q \
  -p no:cacheprovider -n 8 tests/alignment tests/registration > "$OUT/pytest_gpu.txt" 2>&1
tail -25 "$OUT/pytest_gpu.txt"
timeout 150 python3 tools/patch_timeline.py 4096 > "$OUT/timeline.txt" 2>&1
grep -B2 -A40 "== patches" "$OUT/timeline.txt" | head -60; head -3 "$OUT/timeline.txt"
timeout 150 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
tail -12 "$OUT/bench_patches.txt"
