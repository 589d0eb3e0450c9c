"""Development probe (device): --gpus runs against one-GPU runs on drifting stacks, the largest
shift difference and the plans (tests/test_split_runs.py::test_gpus_option_equals_one_gpu)."""
import sys, numpy as np, tempfile, pathlib
sys.path.insert(0, "tests")
from synthetic import drift_stack, write_stack
from xcorr_app import align
tmp = pathlib.Path(tempfile.mkdtemp())
for seed in range(6):
    rng = np.random.default_rng(seed)
    stack, _ = drift_stack(rng, n=29, shape=(96, 130), max_shift=4, peak_counts=500)
    path = write_stack(tmp / f"s{seed}.tif", stack)
    kw = dict(reference="mean", max_shift=6, device="gpu", chunk_frames=4)
    base = align(path, **kw)
    for gpus in ("all", [0]):
        got = align(path, gpus=gpus, **kw)
        d = np.abs(got.shifts - base.shifts).max()
        print(seed, gpus, base.plan, got.plan, f"{d:.2e}", flush=True)
