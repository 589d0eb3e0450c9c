#!/usr/bin/env bash
# Session of 2026-11-23 (third), second call (issue 24): the C++ floor of the ways to enqueue one
# kernel with new pointers (runtime, driver, a one-kernel graph with its parameters set each
# call), and every candidate of the pipeline rows back to back and in graph replay.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace >/tmp/build_ext.txt 2>&1
nproc; grep -m1 "model name" /proc/cpuinfo
{ nvcc -O2 -o /tmp/lf tools/launch_floor.cu -lcuda && /tmp/lf; } 2>&1 | tee "$OUT/floor.txt"
(cd tools && timeout 240 python3 plan_b2b_probe.py) > "$OUT/b2b.txt" 2>&1; cat "$OUT/b2b.txt" | cut -c1-160
