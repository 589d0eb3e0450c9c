#!/usr/bin/env bash
# Session of 2026-11-23 (second), final calls.  Both parts build the compiled launch path in place
# (python3 setup.py build_ext --inplace, else gcc) and the shipped kernels (compile_check --keep).
# PART=1: the GPU suite, the plan-call host time (dispatch_probe plan), xcorr bench xcorr's
# pipeline rows.  PART=2: the --patches bench (seed 0, 4096 frames; seeds 1, 2, 1024 frames)
# and cold/warm one-shot runs (tools/device_s5b.sh).  Logs under $OUT.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
inc=$(python3 -c "import sysconfig;print(sysconfig.get_paths()['include'])")
suf=$(python3 -c "import sysconfig;print(sysconfig.get_config_var('EXT_SUFFIX'))")
python3 setup.py -q build_ext --inplace >/tmp/build_ext.txt 2>&1 || \
  gcc -shared -fPIC -O2 -Wall -I"$inc" xcorr_app/_cuda/_fastlaunch.c -ldl -o xcorr_app/_cuda/_fastlaunch$suf
python3 -m compileall -q xcorr_app tools >/dev/null 2>&1
[ -f xcorr_app/_cuda/built/index.json ] || python3 -m xcorr_app._cuda.compile_check --keep 2>&1 | tail -1
python3 -m xcorr_app.cli info 2>&1 | grep -E "compiled launch|shipped built"
if [ "${PART:-1}" = 1 ]; then
  XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout ${SUITE_T:-330} python3 -m pytest -m gpu -q -p no:cacheprovider \
    -n 8 --maxfail=30 ${SUITE_ARGS:-} > "$OUT/pytest_gpu.txt" 2>&1; tail -3 "$OUT/pytest_gpu.txt"
  timeout 100 python3 tools/dispatch_probe.py plan > "$OUT/dispatch.txt" 2>&1; cat "$OUT/dispatch.txt" | cut -c1-150
  timeout 150 python3 -m xcorr_app.cli bench xcorr --only one_to_one > "$OUT/bench_xcorr.txt" 2>&1
  timeout 60 python3 -m xcorr_app.cli bench xcorr --only 1x8 >> "$OUT/bench_xcorr.txt" 2>&1
  grep -E "^\| one_to|^\| 1x8|cost model vs tuned" "$OUT/bench_xcorr.txt" | cut -c1-250
  exit 0
fi
timeout 200 python3 -m xcorr_app.cli bench align --patches 4x4 --frames 4096 --size 512x512 > "$OUT/bench_patches.txt" 2>&1
tail -14 "$OUT/bench_patches.txt"
for s in 1 2; do
  timeout 100 python3 -c "from xcorr_app.bench._align_patches import main; main((4, 4), frames=1024, seed=$s)" 2>&1 | tail -8
done | tee "$OUT/bench_patches_seeds.txt"
OUT=$OUT/s5b bash tools/device_s5b.sh 2>&1 | grep -E "wall|printed" | head -8
