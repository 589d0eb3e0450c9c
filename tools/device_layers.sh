#!/usr/bin/env bash
# Development call (issue 24): the plan call's layers (tools/layer_probe.py) and the C++ floor
# (tools/launch_floor.cu), twice each, interleaved.
. tools/device_env.sh
nvcc -O2 -o /tmp/lf tools/launch_floor.cu -lcuda 2>&1 | tail -2
for r in 1 2; do
  (cd tools && timeout 120 python3 layer_probe.py) 2>&1 | grep -v "^planning"
  timeout 60 /tmp/lf 2>&1 | grep -E "graph|enqueue alone"
done | tee "$OUT/layers.txt"
