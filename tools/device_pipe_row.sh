#!/usr/bin/env bash
# Development call (issue 24): tools/pipe_row_probe.py on the device.
. tools/device_env.sh
(cd tools && timeout 300 python3 pipe_row_probe.py) 2>&1 | tee "$OUT/pipe_row.txt" | grep -v "^planning"
