#!/usr/bin/env bash
# Session of 2026-11-23 (second): the launch floor from C++ and from Python (issue 24), whether the
# device can build a C extension, and cProfiles of a cold and a warm one-shot 64-frame 2048^2
# `--max-shift 16` run (issue 26).  Logs under $OUT.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
nvcc -O2 -o /tmp/lf tools/launch_floor.cu && /tmp/lf
python3 -c "import sysconfig, os; p = sysconfig.get_paths()['include']; print('Python.h', os.path.exists(p + '/Python.h'), p)"
which gcc cc g++ 2>&1 | head -3
nproc; python3 -c "import cupy; print(cupy.__version__)"
} > "$OUT/floor.txt" 2>&1
cat "$OUT/floor.txt"
[ -f xcorr_app/_cuda/built/index.json ] || python3 -m xcorr_app._cuda.compile_check --keep 2>&1 | tail -1
timeout 120 python3 tools/dispatch_probe.py host plan > "$OUT/dispatch.txt" 2>&1; tail -30 "$OUT/dispatch.txt"
mkdir -p /tmp/probe
python3 -c "
from xcorr_app.bench._align_data import SyntheticStack, default_workers
SyntheticStack(64, (2048, 2048), seed=0).write('/tmp/probe/s64.tif', workers=default_workers())"
C="CUPY_CACHE_DIR=/tmp/c/cupy XCORR_CACHE_DIR=/tmp/c/x"
rm -rf /tmp/c
for k in cold warm warm2; do
  env $C python3 tools/compile_log.py $OUT/compiles_$k.txt $OUT/prof_$k.txt align /tmp/probe/s64.tif --max-shift 16 --out /tmp/o/$k --force --no-aligned -q
  python3 -c "import json; d=json.load(open('/tmp/o/$k/shifts.json')); print('$k printed', d['frames_per_second'], 'frames/s,', d['seconds_measuring'], 's measuring')"
  head -1 $OUT/compiles_$k.txt
done
