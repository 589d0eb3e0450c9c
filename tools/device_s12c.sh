#!/usr/bin/env bash
# Session of 2026-11-23 (eighth), issue 27: the rigid pass's prepared chunks kept for the later
# passes (alignment/_prepared.py) and the new refinement.  The new tests, the GPU suite, the
# GPU-resident timeline, then `xcorr bench align --patches 4x4` on 4096 frames of 512x512.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } | tee "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/alignment/test_prepared.py \
  tests/alignment/test_gpu_refine_fused.py > "$OUT/new_tests.txt" 2>&1; tail -1 "$OUT/new_tests.txt"; grep -E "^FAILED|^E " "$OUT/new_tests.txt" | head -20
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1; tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head
timeout 100 python3 tools/patch_timeline.py 4096 > "$OUT/timeline.txt" 2>&1; sed -n 1,40p "$OUT/timeline.txt" | grep -v Warn
timeout 170 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
tail -13 "$OUT/bench_patches.txt"
