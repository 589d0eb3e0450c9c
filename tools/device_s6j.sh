#!/usr/bin/env bash
# Session of 2026-11-23 (third), on an H200 (the thesis's figures' GPU, issue 24): the C++ launch
# floor, the plan call's host time and the bench's pipeline rows (one-to-one and 1x8).
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > "$OUT/build_ext.txt" 2>&1
[ -f xcorr_app/_cuda/built/index.json ] || python3 -m xcorr_app._cuda.compile_check --keep 2>&1 | tail -1
nvidia-smi --query-gpu=name --format=csv,noheader; nproc; grep -m1 "model name" /proc/cpuinfo
{ nvcc -O2 -o /tmp/lf tools/launch_floor.cu -lcuda && /tmp/lf; } > "$OUT/floor.txt" 2>&1; grep -E "enqueue alone us per call: cuLaunch|back to back" "$OUT/floor.txt"
timeout 150 python3 -m xcorr_app.cli bench xcorr --only one_to_one > "$OUT/bench_xcorr.txt" 2>&1
timeout 80 python3 -m xcorr_app.cli bench xcorr --only 1x8 >> "$OUT/bench_xcorr.txt" 2>&1
grep -E "^\| one_to|cost model vs tuned|^xcorr bench" "$OUT/bench_xcorr.txt" | cut -c1-170
{ (cd tools && timeout 100 python3 dispatch_probe.py plan); (cd tools && timeout 150 python3 fastcall_probe.py); } > "$OUT/probes.txt" 2>&1
grep -E "^==|plan call, out given \(compiled\)|GPU:|plan\(" "$OUT/probes.txt" | cut -c1-150
