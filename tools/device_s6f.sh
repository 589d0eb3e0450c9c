#!/usr/bin/env bash
# Session of 2026-11-23 (third), sixth call (issue 24): where the small pairs' kernels spend
# their time (Nsight Compute, the 4th launch: inputs in L2 as in a pipeline).
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
m=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_elapsed.avg,smsp__inst_executed.sum
m=$m,sm__warps_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum
for st in barrier long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle \
          not_selected selected no_instruction dispatch_stall lg_throttle membar; do
  m=$m,smsp__average_warps_issue_stalled_${st}_per_issue_active.ratio
done
for args in "16" "32" "16 8" "16 8 small:tile_y=1,row_splits=16" "32 0 small:tile_y=1,row_splits=16"; do
  echo "== $args"
  ncu --clock-control none -k "regex:xcorr" --launch-skip 3 -c 1 --metrics "$m" \
    python3 tools/ncu_small_pairs.py $args 2>&1 | grep -E "gpu__|sm__|smsp__|l1tex|==ERR|rror" | grep -v "==PROF==" | sed 's/  */ /g'
done 2>&1 | tee "$OUT/ncu.txt"
