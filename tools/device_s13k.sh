#!/usr/bin/env bash
# Session of 2026-11-24, issue 27: the refinement template made on a thread: the GPU tests of
# alignment, the bench, the GPU's idle gaps (tools/gap_timeline.py).  Logs under $OUT.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name --format=csv,noheader; } | tee "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 tests/alignment > "$OUT/pytest.txt" 2>&1; tail -1 "$OUT/pytest.txt"
grep -E "^FAILED|^ERROR" "$OUT/pytest.txt" | head; grep -B40 "short test summary" "$OUT/pytest.txt" | head -80 > "$OUT/failures.txt"
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 200 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
grep -E "^\| xcorr|^\| rigid|^\| per-patch|^\| one-shot" "$OUT/bench_patches.txt"
timeout 120 python3 tools/gap_timeline.py > "$OUT/gaps.txt" 2>&1
sed -n '/GPU span/,/host annotations/p' "$OUT/gaps.txt" | head -20
