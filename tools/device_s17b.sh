#!/usr/bin/env bash
# Session of 2026-11-25, issue 27, the final code on one H200: the whole GPU suite, the window
# probe (chunks of 256 and 1024 spectra), the patch bench at 8x8 and 4x4 (4096 frames of
# 512x512, with its one-shot rows: cold and warm caches).
. tools/device_env.sh
gpu_tests
for n in 256 1024; do timeout 120 python3 tools/fft_window_probe.py $n 14 > "$OUT/fft_window_probe_$n.txt" 2>&1; head -3 "$OUT/fft_window_probe_$n.txt"; done
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
for g in 8x8 4x4; do bench_patches $g; done
