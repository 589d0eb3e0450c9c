#!/usr/bin/env bash
# Session of 2026-11-25, issue 27: the rigid pass's inverse at the window of shifts
# (correlate/_fft_window.py): its probe (chunks of 1024 and 256 spectra), the GPU tests of
# correlate, registration and alignment ($1 = quick: the window's and align's alone), the
# patch bench at 8x8 ($2 = nobench: none).
. tools/device_env.sh
for n in 1024 256; do timeout 120 python3 tools/fft_window_probe.py $n 14 2>&1 | tee "$OUT/fft_window_probe_$n.txt" | tail -4; done
if [ "${1:-}" = quick ]; then
  gpu_tests tests/correlate/test_gpu_fft_window.py tests/registration tests/alignment/test_gpu_align.py
else
  gpu_tests tests/correlate tests/registration tests/alignment
fi
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
[ "${2:-}" = nobench ] || bench_patches 8x8
