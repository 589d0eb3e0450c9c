"""The patch pass's surfaces and peaks on the GPU (alignment/piecewise/_patches.py ``patch_peaks``: the
fused kernels of registration/_surfaces.py in their batched mode) against the generic GPU path
they replace (``normalize.zncc`` on CuPy, ``peaks.find_shifts``) and the CPU in float64.

Tolerances: integer peaks identical; shifts within 1e-4 px of the generic GPU path and 1e-3 px
of the float64 CPU; peak values within 1e-5; confidences within 1e-4 relative."""

import numpy as np
import pytest

from xcorr_app.alignment.piecewise import common_area
from xcorr_app.alignment.piecewise._patches import (PatchGrid, patch_left, patch_peaks,
                                                    patch_shifts, refine_taper, tapered,
                                                    template_patches, windows)
from xcorr_app.alignment.rigid import prepare
from xcorr_app.bench._align_data import nonrigid_stack
from xcorr_app.correlate import cross_correlate
from xcorr_app.registration import ZnccLeft, find_shifts, zncc, zncc_left

pytestmark = pytest.mark.gpu

SHAPE = (160, 176)


@pytest.fixture(scope="module")
def prepared():
    stack, params = nonrigid_stack(np.random.default_rng(27), 40, SHAPE, 6.0, 3.0, 400.0,
                                   "coins")
    rigid = np.array([p[0] for p in params])
    return prepare(stack, np).frames, rigid


def generic(tp, right, d, method):
    """The GPU path before the fused kernels (and the CPU's definition): the n_to_mn sums,
    normalize.zncc, peaks.find_shifts."""
    corr = cross_correlate(tp, right, "n_to_mn", max_shift=d,
                           device="cpu" if isinstance(right, np.ndarray) else "gpu")
    part = zncc_left(tp, right.shape, d)
    per = ZnccLeft(part.n, part.mean[:, None], part.var[:, None], part.bad[:, None])
    return find_shifts(zncc(corr, tp, right, d, left_part=per), (d, d), method,
                       return_index=True)


@pytest.mark.parametrize("grid_shape, d", [((3, 4), 4), ((1, 1), 4), ((2, 3), 1)])
@pytest.mark.parametrize("method", ["gaussian", "parabolic3"])
def test_fused_patch_peaks_equal_the_generic_gpu_path_and_the_cpu(prepared, grid_shape, d,
                                                                  method):
    import cupy as cp

    frames, rigid = prepared
    grid = PatchGrid.make(grid_shape, None, d, SHAPE, common_area(rigid, SHAPE, d + 2))
    tp = template_patches(frames[0], grid)
    right = windows(frames, grid, np.round(rigid).astype(np.int64))
    taper = refine_taper(grid.size, flat=16)  # (weighted patches, as the refinement's)
    for t, r in ((tp, right), (tapered(tp, taper), tapered(right, taper))):
        g_t, g_r = cp.asarray(t), cp.asarray(r)
        got = [a.get() for a in patch_peaks(g_t, g_r, d, method, "gpu", patch_left(g_t, d))]
        old = [a.get() for a in generic(g_t, g_r, d, method)]
        cpu = patch_peaks(t.astype(np.float64), r.astype(np.float64), d, method, "cpu", None)
        assert got[0].shape == (grid.n_patches, len(frames), 2)
        # the generic GPU path sums in another order (float32 surfaces): its subpixel shifts
        # differ by up to 3e-5 px (H200, 2026-11-23); the float64 CPU's within 1e-3 px
        for want, atol in ((old, 1e-4), (cpu, 1e-3)):
            np.testing.assert_array_equal(got[3], want[3])
            np.testing.assert_array_equal(got[4], want[4])
            np.testing.assert_allclose(got[0], want[0], rtol=0, atol=atol)
            np.testing.assert_allclose(got[1], want[1], rtol=0, atol=max(atol, 1e-5))
            np.testing.assert_allclose(got[2], want[2], rtol=1e-4)


def test_flat_template_patch_is_low_as_on_the_cpu(prepared):
    """A constant template patch (zero variance): -1 at every shift on both devices, so its
    peak lies on the border at (-d, -d), its confidence is 1 (no distinct peak)."""
    import cupy as cp

    frames, rigid = prepared
    d = 3
    grid = PatchGrid.make((2, 2), None, d, SHAPE, common_area(rigid, SHAPE, d + 2))
    tp = template_patches(frames[0], grid)
    tp[2] = 7.0
    cpu = patch_shifts(tp, frames.astype(np.float64), rigid, grid)
    gpu = [a.get() for a in patch_shifts(cp.asarray(tp), cp.asarray(frames), rigid, grid,
                                         device="gpu")]
    np.testing.assert_allclose(gpu[0], cpu[0], rtol=0, atol=1e-3)
    np.testing.assert_allclose(gpu[1], cpu[1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(gpu[2], cpu[2], rtol=1e-4)
    np.testing.assert_array_equal(gpu[3], cpu[3])
    assert (gpu[1][:, 2] == -1.0).all() and (gpu[2][:, 2] == 1.0).all() and gpu[3][:, 2].all()
