#!/usr/bin/env bash
# Session of 2026-11-23 (sixth), issue 27 (a fresh machine): the cold one-shot
# `xcorr align --patches` with its NVRTC compilations logged (first, caches empty), warm runs;
# the GPU-resident timeline; the host in/out stages (align(out=)); the GPU suite; then
# `xcorr bench align --patches 4x4` on 4096 frames of 512x512.  Logs under $OUT.
bash tools/device_s9b.sh
export PYTHONPATH=/tmp/site:$PWD XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 200 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "${OUT:-/tmp/out}/bench_patches.txt" 2>&1
tail -14 "${OUT:-/tmp/out}/bench_patches.txt"
