"""Development probe (device): the patch pass's search (16 template patches of 145x145 against
their windows of 256 frames, n_to_mn within +-4 px, the bench's --patches 4x4 shape) and the
rigid pass's (one 512x512 reference against 256 frames within +-14 px): what the cost model
picks, and every candidate measured (the planner's "full" tuning), fastest first.

    python3 tools/patch_search_probe.py
"""
import cupy as cp

from xcorr_app.correlate._planner import decide

rng = cp.random.default_rng(0)
problems = {
    "patch search n_to_mn 16 x (16, 256) of 145x145, +-4": (
        rng.standard_normal((16, 145, 145), dtype=cp.float32),
        rng.standard_normal((16, 256, 145, 145), dtype=cp.float32), "n_to_mn", 4),
    "rigid one_to_many 1 x 256 of 512x512, +-14": (
        rng.standard_normal((512, 512), dtype=cp.float32),
        rng.standard_normal((256, 512, 512), dtype=cp.float32), "one_to_many", 14),
}
for name, (left, right, form, bound) in problems.items():
    model = decide(left, right, form, bound, refresh=True, tune=False)
    full = decide(left, right, form, bound, refresh=True, tune="full")
    print(f"== {name}\n  model: {model.reason}\n  measured: {full.reason}")
    for plan, ms in full.timings[:12]:
        print(f"    {ms:8.3f} ms  {plan}")
