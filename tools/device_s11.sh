#!/usr/bin/env bash
# Session of 2026-11-23 (seventh), issue 27 (a fresh machine): lucas_kanade auto judged on the
# GPU and decided first.  The cold one-shot `xcorr align --patches` (compilations logged) and
# warm runs; the GPU suite; GPU-resident walls with lucas_kanade auto against off and the
# judgement's time (tools/gap_probe.py); Nsight Compute on the refinement kernel; then
# `xcorr bench align --patches 4x4` on 4096 frames of 512x512.  Logs under $OUT.
. tools/device_env.sh
. tools/device_oneshot.sh
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 280 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1; tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 150 python3 tools/gap_probe.py 4096 2>&1 | grep -v -i warn > "$OUT/gaps.txt"; cat "$OUT/gaps.txt"
timeout 100 bash tools/ncu_refine.sh > "$OUT/ncu.txt" 2>&1; tail -30 "$OUT/ncu.txt"
timeout 200 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "$OUT/bench_patches.txt" 2>&1
tail -14 "$OUT/bench_patches.txt"
