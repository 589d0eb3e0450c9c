#!/usr/bin/env bash
# Session of 2026-11-25 (2), issue 27: the rigid pass's blocks fetched by queued copies
# (HostCopy) and the periodic test's frames in one set of launches: their GPU tests, the 8x8
# bench, the 8x8 timeline and the host's time in the parts the GPU waits for.
. tools/device_env.sh
export XCORR_CACHE_DIR=/tmp/c/x CUPY_CACHE_DIR=/tmp/c/cupy
gpu_tests tests/registration tests/alignment/test_template.py tests/alignment/test_align.py \
  tests/alignment/test_gpu_align.py tests/alignment/test_align_pipeline.py tests/alignment/test_cpu_path.py
bench_patches 8x8
timeout 150 python3 tools/patch_timeline.py 4096 out 8x8 > "$OUT/timeline_8x8.txt" 2>&1
sed -n 1,45p "$OUT/timeline_8x8.txt" | cut -c1-120
timeout 100 python3 tools/host_phase_probe.py 4096 8x8 > "$OUT/host_phases.txt" 2>&1  # (removed after: its cProfile callees all read under a millisecond; tools/host_marks.py took its place)
