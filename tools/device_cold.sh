#!/usr/bin/env bash
# Cold and warm one-shot runs of the samples (this tree, and .old/ when present), the GPU
# suite, and a profile of one cold run; logs under $OUT.
set -u -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. tools/samples_cold_warm.sh
samples_cold_warm 2>&1 | tee "$OUT/samples.txt"
bash tools/cold_profile.sh; grep -m3 "function calls\|compileProgram" "$OUT/cold_profile.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 \
  > "$OUT/pytest_gpu.txt" 2>&1; tail -3 "$OUT/pytest_gpu.txt"
