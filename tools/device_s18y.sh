#!/usr/bin/env bash
# Session of 2026-11-25 (2), issue 27, after the review's mend: the whole GPU suite and the
# 8x8 bench on one H200, on the final code.
. tools/device_env.sh
gpu_tests
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
bench_patches 8x8
