#!/usr/bin/env bash
# Session of 2026-11-23 (fifth), issue 27: the refinement kernel with float32 taps and the
# edges' sums apart (64 registers, four blocks an SM): the GPU tests of alignment and
# streaming, then the GPU-resident timeline.  Logs under $OUT.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
XCORR_REQUIRE_GPU=1 timeout 250 python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 \
  tests/alignment tests/streaming tests/registration > "$OUT/pytest_gpu.txt" 2>&1
tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
timeout 150 python3 tools/patch_timeline.py 4096 > "$OUT/timeline.txt" 2>&1
head -2 "$OUT/timeline.txt"; grep -A24 "^== patches" "$OUT/timeline.txt" | head -26
