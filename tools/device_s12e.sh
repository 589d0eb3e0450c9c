#!/usr/bin/env bash
# Session of 2026-11-23 (eighth), issue 27, the final code: the bench with 8x8 patches (64-px
# patches, the other end), the GPU-resident run's phases, the refinement's A/B.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; } | tee "$OUT/device.txt"
timeout 200 python3 -m xcorr_app.cli bench align --patches 8x8 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches_8x8.txt" 2>&1
tail -13 "$OUT/bench_patches_8x8.txt"
timeout 80 python3 tools/phase_probe.py 4096 > "$OUT/phases.txt" 2>&1; tail -22 "$OUT/phases.txt"
XCORR_REQUIRE_GPU=1 timeout 60 python3 -m pytest -q -p no:cacheprovider tests/alignment/test_prepared.py > "$OUT/prepared_tests.txt" 2>&1; tail -1 "$OUT/prepared_tests.txt"
[ -d tools/ab ] && timeout 90 python3 tools/refine_ab.py 1024 > "$OUT/refine_ab.txt" 2>&1; tail -14 "$OUT/refine_ab.txt"
