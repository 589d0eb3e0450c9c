#!/usr/bin/env bash
# Session of 2026-11-24, issue 27: the refinement's row coefficients from field_rows (a table a launch; its field's
# sums per row no longer in the kernel): its time, the GPU tests of alignment, the bench, the
# timeline with out=.  Logs under $OUT.  (carry tools/ab: refine_prev.cu, patch_field_old.cu)
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name --format=csv,noheader; } | tee "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 tests/alignment > "$OUT/pytest.txt" 2>&1; tail -1 "$OUT/pytest.txt"
grep -E "^FAILED|^ERROR" "$OUT/pytest.txt" | head; grep -B40 "short test summary" "$OUT/pytest.txt" | head -80 > "$OUT/failures.txt"
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 120 python3 tools/refine_ab.py 1024 2>&1 | tee "$OUT/refine_ab.txt" | tail -12
timeout 200 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
grep -E "^\| xcorr|^\| rigid|^\| per-patch|^\| one-shot" "$OUT/bench_patches.txt"
timeout 120 python3 tools/patch_timeline.py 4096 out > "$OUT/timeline.txt" 2>&1
grep -E "^patches|^rigid|under the profiler|GPU span| ms .*x " "$OUT/timeline.txt" | head -12
