#!/usr/bin/env bash
# The closing device call: the GPU suite (a CuPy that cannot start fails it) and the two align
# benchmarks (GPU with one-shot rows, CPU against the skimage loop); logs under $OUT.
set -u -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 \
  > "$OUT/pytest_gpu.txt" 2>&1; tail -3 "$OUT/pytest_gpu.txt"
export XCORR_CACHE_DIR=/tmp/bench-cache CUPY_CACHE_DIR=/tmp/bench-cupy
python3 -m xcorr_app.cli bench align --device cpu --json "$OUT/bench_align_cpu.json" > "$OUT/bench_align_cpu.txt" 2>&1
tail -14 "$OUT/bench_align_cpu.txt"
python3 -m xcorr_app.cli bench align --json "$OUT/bench_align_gpu.json" > "$OUT/bench_align_gpu.txt" 2>&1
tail -20 "$OUT/bench_align_gpu.txt"
