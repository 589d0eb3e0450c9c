#!/usr/bin/env bash
# Session of 2026-11-23 (third), the final call (issue 24): the bench's pipeline rows (one-to-one,
# 1x8), the plan call's host time and the whole GPU suite, in one call.  Logs under $OUT.
. tools/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader; grep -m1 "model name" /proc/cpuinfo
python3 -m xcorr_app.cli info 2>&1 | grep -E "compiled launch|shipped built"
timeout 150 python3 -m xcorr_app.cli bench xcorr --only one_to_one > "$OUT/bench_xcorr.txt" 2>&1
timeout 80 python3 -m xcorr_app.cli bench xcorr --only 1x8 >> "$OUT/bench_xcorr.txt" 2>&1
grep -E "^\| one_to|cost model vs tuned|^xcorr bench" "$OUT/bench_xcorr.txt" | cut -c1-175
{ (cd tools && timeout 100 python3 dispatch_probe.py plan); (cd tools && timeout 150 python3 fastcall_probe.py); } > "$OUT/probes.txt" 2>&1
grep -E "^==|plan call, out given \(compiled\)|GPU:|plan\(" "$OUT/probes.txt" | cut -c1-150
# the suite last: the 06:12 H200 call, suite first, gave the 16x16 row 0.0043 ms back to back,
# the same row alone on that machine 0.0032 (the cause not found: no xcorr process is left)
if [ "${SUITE:-1}" = 1 ]; then
  XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider \
    -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1; tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED" "$OUT/pytest_gpu.txt" | head
fi
echo "xcorr processes still running after the suite: $(pgrep -fc 'xcorr_app' || true)"
