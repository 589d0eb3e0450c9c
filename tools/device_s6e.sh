#!/usr/bin/env bash
# Session of 2026-11-23 (third), fifth call (issue 24): the warp-per-shift kernel's warps a block.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > "$OUT/build_ext.txt" 2>&1
(cd tools && timeout 300 python3 shift_warps_probe.py) 2>&1 | tee "$OUT/warps.txt"
