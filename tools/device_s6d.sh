#!/usr/bin/env bash
# Session of 2026-11-23 (third), fourth call (issue 24): a plan's call in C (Dispatch) and its
# one-graph launches: their GPU tests, the plan call's layers, the bench's pipeline rows.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > "$OUT/build_ext.txt" 2>&1; tail -3 "$OUT/build_ext.txt"
[ -f xcorr_app/_cuda/built/index.json ] || python3 -m xcorr_app._cuda.compile_check --keep 2>&1 | tail -1
python3 -m xcorr_app.cli info 2>&1 | grep -E "compiled launch"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 tests/correlate/test_correlation_plan.py tests/correlate/test_correlation_plan_fastlaunch.py \
  tests/_cuda tests/correlate/test_gpu_warp_shuffle.py > "$OUT/pytest_part.txt" 2>&1; tail -2 "$OUT/pytest_part.txt"
grep -E "^FAILED|Error" "$OUT/pytest_part.txt" | head -20
(cd tools && timeout 200 python3 fastcall_probe.py) > "$OUT/probes.txt" 2>&1; cat "$OUT/probes.txt"
timeout 130 python3 -m xcorr_app.cli bench xcorr --only one_to_one > "$OUT/bench_xcorr.txt" 2>&1
timeout 60 python3 -m xcorr_app.cli bench xcorr --only 1x8 >> "$OUT/bench_xcorr.txt" 2>&1
grep -E "^\| one_to|cost model vs tuned" "$OUT/bench_xcorr.txt" | cut -c1-200
