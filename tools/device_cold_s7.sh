#!/usr/bin/env bash
# Session of 2026-11-23 (fourth), issue 26: the cell sample's first run on the GPU of a fresh
# machine (empty driver, CuPy and xcorr caches), its NVRTC compilations logged
# (tools/compile_log.py), then warm, `auto` and the CPU; then the whole GPU suite.  Logs under $OUT.
. tools/device_env.sh
nvidia-smi --query-gpu=name --format=csv,noheader
echo "driver JIT cache entries: $(find ~/.nv/ComputeCache -type f 2>/dev/null | wc -l)"
tm() { local l=$1; shift; local t0=$EPOCHREALTIME; "$@" >/dev/null 2>>"$OUT/err.txt" || echo "$l FAILED"
  awk -v a="$t0" -v b="$EPOCHREALTIME" -v l="$l" 'BEGIN {printf "| %-44s | %5.2f s |\n", l, b - a}'; }
C="CUPY_CACHE_DIR=/tmp/c/cupy XCORR_CACHE_DIR=/tmp/c/x"
{
rm -rf /tmp/c; tm "cold: cell --device gpu (fresh machine)" env $C python3 tools/compile_log.py $OUT/compiles_cell.txt /tmp/p1.txt align sample_data/cell_drift.tif --device gpu --out /tmp/o/cell --force -q
head -1 $OUT/compiles_cell.txt
tm "warm: cell --device gpu" env $C python3 -m xcorr_app.cli align sample_data/cell_drift.tif --device gpu --out /tmp/o/cell --force -q
tm "warm: cell --device gpu (again)" env $C python3 -m xcorr_app.cli align sample_data/cell_drift.tif --device gpu --out /tmp/o/cell --force -q
rm -rf /tmp/c; tm "cold: cell (auto)" env $C python3 -m xcorr_app.cli align sample_data/cell_drift.tif --out /tmp/o/cella --force -q
tm "cpu: cell" python3 -m xcorr_app.cli align sample_data/cell_drift.tif --out /tmp/o/cellcpu --device cpu --force -q
tm "cpu: cell (again)" python3 -m xcorr_app.cli align sample_data/cell_drift.tif --out /tmp/o/cellcpu --device cpu --force -q
python3 -c "
import numpy as np, tifffile
a, b = tifffile.imread('/tmp/o/cell/aligned.tif'), tifffile.imread('/tmp/o/cellcpu/aligned.tif')
print('aligned.tif GPU vs CPU: max |diff|', float(np.nanmax(np.abs(a - b))), 'of', float(np.nanmax(np.abs(b))))"
} 2>&1 | tee "$OUT/cold_cell.txt"
XCORR_REQUIRE_GPU=1 XCORR_CACHE_DIR=/tmp/suite-cache timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider \
  -n 8 --maxfail=30 > "$OUT/pytest_gpu.txt" 2>&1; tail -1 "$OUT/pytest_gpu.txt"; grep -E "^FAILED" "$OUT/pytest_gpu.txt" | head
