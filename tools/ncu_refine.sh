#!/usr/bin/env bash
# Development probe (device): Nsight Compute on one launch of the patch pass's refinement
# (refine_surfaces) of a GPU-resident --patches 4x4 run of 256 frames: duration, throughputs,
# issue activity and the stall reasons (issue 27).
set -u
m=gpu__time_duration.sum,sm__cycles_active.avg,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active
m=$m,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__throughput.avg.pct_of_peak_sustained_elapsed
m=$m,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed
m=$m,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active
m=$m,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,l1tex__t_sector_hit_rate.pct
m=$m,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active
for st in barrier long_scoreboard short_scoreboard wait math_pipe_throttle mio_throttle \
          not_selected selected no_instruction lg_throttle tex_throttle; do
  m=$m,smsp__average_warps_issue_stalled_${st}_per_issue_active.ratio
done
ncu --clock-control none -k "regex:refine_surfaces" -s 1 -c 1 --metrics "$m" python3 -c "
import cupy as cp
from xcorr_app.alignment._api import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack
s, _ = make_stack(256, (512, 512), seed=0)
align(cp.asarray(s), max_shift=MAX_SHIFT, device='gpu', verify=False, patches=(4, 4),
      max_deviation=MAX_DEVIATION, lucas_kanade='off')
" 2>&1 | grep -E "refine_surfaces|gpu__|sm__|smsp__|l1tex|lts__|dram__" | grep -v "==PROF=="
