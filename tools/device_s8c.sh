#!/usr/bin/env bash
# Issue 27, for the next device (none was lent after 11:10 UTC on 2026-11-23): run on a tree
# with branches refine-f32 (the float32 refinement kernel) and fill8 (fill_low as one kernel)
# merged, after `python -m xcorr_app._cuda.compile_check --keep`.  The GPU tests of alignment
# and registration (the fused refinement's and fill_low's against the CPU), then the
# GPU-resident timeline and the --patches bench; logs under $OUT.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 200 python3 -m pytest -m gpu -q \
  -p no:cacheprovider -n 8 tests/alignment tests/registration > "$OUT/pytest_gpu.txt" 2>&1
tail -8 "$OUT/pytest_gpu.txt"
timeout 150 python3 tools/patch_timeline.py 4096 > "$OUT/timeline.txt" 2>&1
head -3 "$OUT/timeline.txt"; grep -A30 "== patches" "$OUT/timeline.txt" | head -34
timeout 150 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
tail -9 "$OUT/bench_patches.txt"
