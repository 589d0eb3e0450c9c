#!/usr/bin/env bash
# Session of 2026-11-23 (fifth), issue 27, the last call (a fresh machine): tools/device_s9b.sh
# (the cold one-shot --patches with its compilations, warm runs, the GPU-resident timeline,
# the host in/out stages, the GPU suite), then `xcorr bench align --patches 4x4` on 4096
# frames of 512x512 (its one-shot rows cold and warm).  Logs under $OUT.
bash tools/device_s9b.sh
export PYTHONPATH=/tmp/site:$PWD XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
timeout 200 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 \
  > "${OUT:-/tmp/out}/bench_patches.txt" 2>&1
tail -14 "${OUT:-/tmp/out}/bench_patches.txt"
