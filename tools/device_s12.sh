#!/usr/bin/env bash
# Session of 2026-11-23 (eighth), issue 27: the refinement kernel with fewer instructions a
# pixel (refine_surfaces.cu).  Its GPU tests, the A/B probe against the previous kernel, the
# GPU suite, then `xcorr bench align --patches 4x4` on 4096 frames of 512x512.  Logs under $OUT.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } | tee "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 timeout 100 python3 -m pytest -q -p no:cacheprovider tests/alignment/test_gpu_refine_fused.py \
  > "$OUT/refine_tests.txt" 2>&1; tail -1 "$OUT/refine_tests.txt"; grep -E "^FAILED|^E " "$OUT/refine_tests.txt" | head -20
timeout 90 python3 tools/refine_ab.py 1024 > "$OUT/refine_ab.txt" 2>&1; cat "$OUT/refine_ab.txt" | tail -14
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 170 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1; tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 170 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
tail -13 "$OUT/bench_patches.txt"
