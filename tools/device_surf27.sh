#!/usr/bin/env bash
# Task surf27 (issue 27): the patch pass's ZNCC and peaks through the fused kernels of
# registration/_surfaces.py (batched mode).  The GPU tests of alignment and registration, the
# patch pass's profile and the --patches bench; logs under $OUT, under 4 minutes in all.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/device.txt" 2>&1
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 130 python3 -m pytest -m gpu -q \
  -p no:cacheprovider -n 8 tests/alignment tests/registration > "$OUT/pytest_gpu.txt" 2>&1
tail -15 "$OUT/pytest_gpu.txt"
timeout 60 python3 tools/patch_timeline.py 1024 > "$OUT/patch_profile.txt" 2>&1
head -3 "$OUT/patch_profile.txt"
grep -E "zncc|find_shifts|surface_peaks|patch_peaks|summed_area|refined_shifts|confidence" \
  "$OUT/patch_profile.txt" | head -20
timeout 60 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 1024 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
tail -9 "$OUT/bench_patches.txt"
