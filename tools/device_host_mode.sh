#!/usr/bin/env bash
# Development call (issue 24): tools/host_mode_probe.py on the device, then the bench's 16x16 row.
. tools/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader; grep -m1 "model name" /proc/cpuinfo; nproc
(cd tools && timeout 240 python3 host_mode_probe.py) 2>&1 | tee "$OUT/host_mode.txt" | grep -v "^planning"
