#!/usr/bin/env bash
# Session of 2026-11-23 (fifth), issue 27, second call (a fresh machine): the cold one-shot
# `xcorr align --patches` with its NVRTC compilations logged (first, caches empty), warm runs;
# the GPU-resident timeline; the host in/out stages; the GPU suite.  Logs under $OUT.
. tools/device_env.sh
. tools/device_oneshot.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 150 python3 tools/patch_timeline.py 4096 > "$OUT/timeline.txt" 2>&1
head -2 "$OUT/timeline.txt"; grep -A8 "^== patches" "$OUT/timeline.txt" | head -3
timeout 200 python3 tools/host_stage_probe.py 4096 > "$OUT/host_stage.txt" 2>&1
head -13 "$OUT/host_stage.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 280 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1; tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head
