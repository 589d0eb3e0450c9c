#!/usr/bin/env bash
# Session of 2026-11-23 (fourth), issue 24: the plan's call without a Python frame
# (_plancall.c): the plan-related GPU tests, the layers' host time, the bench's pipeline rows.
. tools/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader; grep -m1 "model name" /proc/cpuinfo
python3 -m xcorr_app.cli info 2>&1 | grep -E "compiled launch|shipped built"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 tests/_cuda tests/correlate > "$OUT/pytest_plans.txt" 2>&1; tail -1 "$OUT/pytest_plans.txt"; grep -E "^FAILED" "$OUT/pytest_plans.txt" | head
(cd tools && timeout 150 python3 layer_probe.py) 2>&1 | grep -v "^planning" | tee "$OUT/layers.txt"
if [ "${BENCH:-1}" = 1 ]; then
  timeout 150 python3 -m xcorr_app.cli bench xcorr --only one_to_one > "$OUT/bench_xcorr.txt" 2>&1
  timeout 80 python3 -m xcorr_app.cli bench xcorr --only 1x8 >> "$OUT/bench_xcorr.txt" 2>&1
  grep -E "^\| one_to|^\| 1x8|cost model vs tuned|^xcorr bench" "$OUT/bench_xcorr.txt" | cut -c1-175
fi
