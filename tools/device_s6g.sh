#!/usr/bin/env bash
# Session of 2026-11-23 (third), seventh call (issue 24): the warp-per-shift kernel's instruction
# diet (2-D grid, reciprocal steps, float4 staging): its tests, ncu, warps a block, the pipeline rows.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > "$OUT/build_ext.txt" 2>&1
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 tests/correlate/test_gpu_warp_shuffle.py tests/correlate/test_correlation_plan_fastlaunch.py \
  > "$OUT/pytest_part.txt" 2>&1; tail -2 "$OUT/pytest_part.txt"; grep -E "^FAILED" "$OUT/pytest_part.txt" | head
m=gpu__time_duration.sum,sm__cycles_active.avg,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
for args in "16" "32" "16 8"; do echo "== ncu $args"
  ncu --clock-control none -k "regex:xcorr" --launch-skip 3 -c 1 --metrics "$m" \
    python3 tools/ncu_small_pairs.py $args 2>&1 | grep -E "gpu__|sm__|smsp__|l1tex" | sed 's/  */ /g'
done 2>&1 | tee "$OUT/ncu.txt"
(cd tools && timeout 200 python3 shift_warps_probe.py) 2>&1 | tee "$OUT/warps.txt"
(cd tools && timeout 240 python3 plan_b2b_probe.py) > "$OUT/b2b.txt" 2>&1; grep -E "^==|warp_per_shift|small:tile_y=[12],row_splits=16 " "$OUT/b2b.txt" | cut -c1-150
