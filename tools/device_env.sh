# Sourced by the device scripts (bash tools/device_*.sh on the device machine): $OUT made, the
# carried wheels (.whl: Dask and the rest the device lacks) installed in /tmp/site, the compiled
# launch path built in place, the shipped kernels built (compile_check --keep) where absent.
set -u -o pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 setup.py -q build_ext --inplace > "$OUT/build_ext.txt" 2>&1
python3 -m compileall -q xcorr_app tools >/dev/null 2>&1
[ -f xcorr_app/_cuda/built/index.json ] || python3 -m xcorr_app._cuda.compile_check --keep 2>&1 | tail -1

# The patch bench at grid $1 (4096 frames of 512x512) into $OUT/bench_patches_$1.txt, its table
# printed.
bench_patches() {
  timeout 200 python3 -m xcorr_app.cli bench align --patches "$1" --frames 4096 --size 512x512 \
    > "$OUT/bench_patches_$1.txt" 2>&1
  grep -E "^\| |^target" "$OUT/bench_patches_$1.txt" | grep -v -- "---"
}

# The GPU tests of the paths given (all of them without any) into $OUT/pytest_gpu.txt, on 8
# workers, after the machine's name and date ($OUT/device.txt); the summary and the failures
# printed.
gpu_tests() {
  { date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } | tee "$OUT/device.txt"
  XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 250 python3 -m pytest -m gpu -q \
    -p no:cacheprovider -n 8 --maxfail=30 -rf "$@" > "$OUT/pytest_gpu.txt" 2>&1
  tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
}
