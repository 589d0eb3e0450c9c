#!/usr/bin/env bash
# Session of 2026-11-23 (third), third call (issue 24): is a launch dearer on the legacy default
# stream, or when the GPU is idle? The C++ floor on both streams and the plan call's layers on both.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace >/tmp/build_ext.txt 2>&1
{ nvcc -O2 -o /tmp/lf tools/launch_floor.cu -lcuda && /tmp/lf; } 2>&1 | tee "$OUT/floor.txt"
(cd tools && timeout 300 python3 fastcall_probe.py) 2>&1 | tee "$OUT/fastcall.txt"
