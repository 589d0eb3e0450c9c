"""Development probe (CPU): ``--patches 4x4`` on the CPU, 32 frames of 512x512 of the bench's
stack: in process (warm, median of 3) and as one-shot ``xcorr align`` processes (the first
after emptying xcorr's cache, then warm; `--no-aligned --no-verify`).

    python3 tools/cpu_patches_probe.py
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tifffile

from xcorr_app import align
from xcorr_app.bench._align_patches import MAX_DEVIATION, MAX_SHIFT, make_stack

N = 32
stack, _ = make_stack(N, (512, 512), seed=0)
kw = dict(device="cpu", patches=(4, 4), max_shift=MAX_SHIFT, max_deviation=MAX_DEVIATION,
          verify=False)
align(stack[:4], **kw)
walls = []
for _ in range(3):
    t = time.perf_counter()
    align(stack, **kw)
    walls.append(time.perf_counter() - t)
w = statistics.median(walls)
print(f"in process: {w:.2f} s ({N / w:.1f} frames/s; runs {', '.join(f'{x:.2f}' for x in walls)})")
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "stack.tif"
    tifffile.imwrite(path, stack)
    env = dict(os.environ, XCORR_CACHE_DIR=str(Path(tmp) / "cache"))
    for state in ("cold", "warm", "warm"):
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "xcorr_app.cli", "align", str(path), "--out",
                            str(Path(tmp) / "out"), "--force", "--device", "cpu", "--patches",
                            "4x4", "--max-shift", str(MAX_SHIFT), "--max-deviation",
                            str(MAX_DEVIATION), "--no-verify", "--no-aligned", "-q"], env=env,
                           capture_output=True, text=True)
        dt = time.perf_counter() - t
        print(f"one-shot ({state} cache): {dt:.2f} s, exit {r.returncode} {r.stderr.strip()[:200]}")
