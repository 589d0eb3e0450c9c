#!/usr/bin/env bash
# Development probe (device): one launch's duration, active cycles and stall reasons per issued
# instruction, by Nsight Compute, for the first kernel whose name matches REGEX.
# Usage: bash tools/ncu_stalls.sh REGEX python3 tools/ncu_probe.py mma 16 256 4 8 4
set -u
regex=$1; shift
m=gpu__time_duration.sum,sm__cycles_active.avg,sm__cycles_elapsed.avg
m=$m,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
for st in barrier long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle \
          not_selected selected no_instruction dispatch_stall lg_throttle membar; do
  m=$m,smsp__average_warps_issue_stalled_${st}_per_issue_active.ratio
done
ncu --clock-control none -k "regex:$regex" -c 1 --metrics "$m" "$@" 2>&1 |
  grep -E "^  [a-z_]+<|\(|gpu__|sm__|smsp__" | grep -v "==PROF=="
