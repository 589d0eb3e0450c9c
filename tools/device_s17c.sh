#!/usr/bin/env bash
# Session of 2026-11-25, issue 27, after the review's mend (streaming.copy_to_host_async): the
# whole GPU suite and the patch bench at 8x8 on one H200.
. tools/device_env.sh
gpu_tests
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
bench_patches 8x8
