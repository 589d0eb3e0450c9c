#!/usr/bin/env bash
# Session of 2026-11-24 (night), issue 27: the refinement kernel against b2d83e3's (tools/ab/old:
# `git archive b2d83e3 xcorr_app tools/refine_ab.py`, carried), then the GPU tests of TESTS and
# the patch bench at GRIDS (default 8x8) with the kernels' timeline.
. tools/device_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/device.txt"
for g in 8x8 4x4; do
  echo "refine $g new: $(timeout 60 python3 tools/refine_ab.py 1024 $g 2>&1 | tail -1)"
  echo "refine $g old: $( cd tools/ab/old && PYTHONPATH=/tmp/site:$PWD timeout 90 python3 tools/refine_ab.py 1024 $g 2>&1 | tail -1)"
done
bash tools/device_s16.sh
