#!/usr/bin/env bash
# Session of 2026-11-25 (2), issue 27, the closing call: the whole GPU suite and the patch
# benches at 8x8 and 4x4 on one H200, on the final code.
. tools/device_env.sh
gpu_tests
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
bench_patches 8x8
bench_patches 4x4
