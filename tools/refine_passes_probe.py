"""Development probe (CPU, issue 27): the field error (px RMS at the patch centres, against the
synthetic truth) for 0..3 refinement passes (``_patches.REFINE_PASSES``) on non-rigid stacks
of several real images and seeds (deformation up to 3 px on rigid drift up to 10 px, peak SNR
20), and on the bench's random scene: does each pass earn its GPU time?

    python3 tools/refine_passes_probe.py
"""

import numpy as np

from xcorr_app.alignment import _patch_pass, _patches
from xcorr_app.alignment._api import align
from xcorr_app.bench._align_data import nonrigid_stack, truth_at

CASES = [  # (image, frame shape, grid)
    (None, (256, 256), (2, 2)), (None, (256, 256), (4, 4)), ("camera", (256, 256), (3, 3)),
    ("moon", (256, 256), (4, 4)), ("brick", (256, 256), (2, 2)), ("coins", (192, 192), (3, 3)),
    ("astronaut", (320, 320), (4, 4))]
rows = {}
for image, shape, grid in CASES:
    for seed in (1, 2, 3):
        rng = np.random.default_rng([seed, 61])
        try:
            stack, params = nonrigid_stack(rng, 8, shape, 10.0, 3.0, 400.0, image, iterations=12)
        except Exception as exc:  # (an image too small for the frame)
            print(image, shape, "skipped:", exc)
            break
        if stack.ndim == 4:
            break
        errs = []
        for passes in (0, 1, 2, 3):
            _patches.REFINE_PASSES = _patch_pass.REFINE_PASSES = passes
            res = align(stack, device="cpu", max_shift=14, verify=False, patches=grid,
                        max_deviation=4)
            d = res.motion_field - truth_at(params, res.patch_centres)
            errs.append(float(np.sqrt(np.nanmean(d ** 2))))
        rows.setdefault((image, shape, grid), []).append(errs)
        print(f"{str(image):10s} {shape} {grid} seed {seed}: " +
              "  ".join(f"{p} passes {e:.4f}" for p, e in enumerate(errs)), flush=True)
print("\nmean over seeds (spread):")
for key, errs in rows.items():
    e = np.array(errs)
    print(f"{str(key[0]):10s} {key[1]} {key[2]}: " + "  ".join(
        f"{p}: {e[:, p].mean():.4f} ({e[:, p].min():.4f}-{e[:, p].max():.4f})"
        for p in range(e.shape[1])))
