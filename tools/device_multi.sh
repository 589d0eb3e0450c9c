#!/usr/bin/env bash
# One device call for the scale-out issue, on a machine with 2 or more GPUs: installs the Dask
# wheels carried in .whl (the device image has no Dask), runs the GPU tests (the --gpus and Dask
# ones among them), `xcorr bench align --gpus all`, and one-shot `xcorr align` processes on one
# GPU, with --gpus all and with --workers 2 (start-up included); logs in $OUT.
# The wheels, made here once (see ../.library/device/README.md):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     -d .whl dask==2026.8.0 distributed==2026.8.0 partd locket tblib tornado zict
set -u -o pipefail
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; export XCORR_CACHE_DIR=$OUT/cache
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  nvidia-smi topo -m; nproc; free -g
  python3 -c 'import dask, distributed, cupy; print("dask", dask.__version__, "distributed", distributed.__version__, "GPUs", cupy.cuda.runtime.getDeviceCount())'
} 2>&1 | tee "$OUT/device.txt"
python3 -m pytest -m gpu -q -n 8 -p no:cacheprovider -p no:benchmark ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest_gpu.txt" | tail -15
WORK=$(mktemp -d)
python3 -m xcorr_app.cli bench align --force --keep --gpus all --workdir "$WORK" --json "$OUT/bench_align.json" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_align.txt"
STACK=$(ls "$WORK"/*/stack.tif | head -1)
for args in "" "--gpus all" "--workers 2"; do
  s=$(date +%s%N)
  python3 -m xcorr_app.cli align "$STACK" $args --no-aligned --force --out "$WORK/out" > "$OUT/oneshot_last.txt" 2>&1
  rc=$?
  echo "one-shot xcorr align $args --no-aligned: rc $rc in $(( ($(date +%s%N) - s) / 1000000 )) ms (process start-up and outputs included); $(grep -m1 'xcorr align:' "$OUT/oneshot_last.txt")" | tee -a "$OUT/oneshot.txt"
  cp "$WORK/out/shifts.csv" "$OUT/shifts_${args//[^a-z0-9]/_}.csv" 2>/dev/null
done
rm -rf "$WORK"
