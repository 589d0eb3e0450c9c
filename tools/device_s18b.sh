#!/usr/bin/env bash
# Session of 2026-11-25 (2), issue 27: the refinement's sampling as column walks (the field's
# column weights in registers) and fft_pad four elements a thread: their GPU tests, A/B of the
# refinement against the kernel before (tools/refine_surfaces_before.cu, removed after), the pad probe, the
# 8x8 bench.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
gpu_tests tests/alignment/test_gpu_refine_fused.py tests/correlate/test_fft_steps.py \
  tests/_cuda/test_shipped.py tests/registration tests/alignment/test_gpu_align.py \
  tests/correlate/test_gpu_fft_window.py tests/correlate/test_gpu_fft.py
python3 tools/pad_probe.py 2>&1 | tail -3
K=xcorr_app/alignment/cuda/refine_surfaces.cu
for g in 8x8 4x4; do echo "new $g: $(python3 tools/refine_ab.py 1024 $g 2>&1 | tail -1)"; done
cp $K /tmp/new.cu; cp tools/refine_surfaces_before.cu $K
for g in 8x8 4x4; do echo "before $g: $(python3 tools/refine_ab.py 1024 $g 2>&1 | tail -1)"; done
cp /tmp/new.cu $K
for g in 8x8; do echo "new again $g: $(python3 tools/refine_ab.py 1024 $g 2>&1 | tail -1)"; done
bench_patches 8x8
