"""The warm-up of a GPU run's kernels (stages in threads) for every kind of run, and a run
after it gives what a run without it gives."""

import numpy as np
import pytest

from xcorr_app import align
from xcorr_app.alignment._options import AlignOptions
from xcorr_app.alignment._warmup import warm_up

from sample_paths import stack_path

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kw", [{}, {"max_shift": 7}, {"normalization": "phase"},
                                {"reference": "previous", "max_shift": 5},
                                {"verify": False, "subpixel": "parabolic3"},
                                {"subpixel": "upsample"}])
@pytest.mark.parametrize("dtype", [np.uint16, np.uint8, np.float32])
def test_warm_up_runs_every_stage(kw, dtype):
    import cupy as cp

    opts = AlignOptions(**kw)
    names = warm_up(opts, (37, 53), dtype, cp)
    assert set(names) == {"prepare", "measure", "refine"} | ({"verify"} if opts.verify else set())
    futures = warm_up(opts, (37, 53), dtype, cp, wait=False, skip=("prepare",))
    assert len(futures) == len(names) - 1
    for f in futures:
        f.result()


@pytest.mark.parametrize("max_shift", [None, 9])
def test_align_with_warm_up_matches_the_cpu(max_shift):
    path = stack_path("cell")
    gpu = align(path, device="gpu", max_shift=max_shift)
    cpu = align(path, device="cpu", max_shift=max_shift)
    np.testing.assert_allclose(gpu.shifts, cpu.shifts, atol=2e-3)
    assert gpu.agree.all()
