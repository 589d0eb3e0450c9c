"""The fused separable correlation (``kernels/filters/separable_conv.cu``) against float64
scipy.ndimage.correlate with the outer product of its taps: every boundary mode and compiled
size, frames smaller than a tile, larger than one (several tiles, partial ones), taller than a
block's column of tiles (4 tiles of 64 rows: the second block's of a column of one partial
tile), non-square and odd, a stack of several frames; outputs poisoned.  And the filters that run on it (gaussian,
box, sobel) against the two passes of the reuse kernels they ran on before."""

import numpy as np
import pytest

from conftest import poisoned, rel_error
from xcorr_app.filters._modes import MODE_IDS
from xcorr_app.filters import SEPARABLE_SIZES as SIZES
from xcorr_app.filters._separable import fused_fits

TOL = 1e-5
SHAPES = [(1, 1, 1), (3, 7, 5), (2, 70, 131), (1, 129, 64), (2, 263, 37)]


def separable_reference(stack, ty, tx, mode, cval):
    """Two float64 ``scipy.ndimage.correlate1d`` passes, rows' axis first (the semantics of
    the separable filters: with ``mode="constant"`` each pass reads ``cval`` outside, so it
    differs from a 2-D correlation with the outer product near the edges)."""
    import scipy.ndimage as ndi

    a = ndi.correlate1d(stack.astype(np.float64), np.asarray(ty, np.float64), axis=-2,
                        mode=mode, cval=cval)
    return ndi.correlate1d(a, np.asarray(tx, np.float64), axis=-1, mode=mode, cval=cval)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", tuple(MODE_IDS))
@pytest.mark.parametrize("size", SIZES)
def test_fused_against_reference(rng, mode, size):
    import cupy as cp

    from xcorr_app.filters import separable_correlate

    for shape in SHAPES:
        stack = (rng.standard_normal(shape) + 0.5).astype(np.float32)
        ty = rng.standard_normal(size) * 0.5 + 0.5
        tx = rng.standard_normal(size) * 0.5 + 0.5
        out = poisoned(cp, shape)
        got = separable_correlate(cp.asarray(stack), ty, tx, mode, cval=0.75, out=out)
        assert got is out
        ref = separable_reference(stack, ty, tx, mode, 0.75)
        err = rel_error(got.get(), ref)
        assert err <= TOL, f"{mode} {size} taps {shape}: relative error {err:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("name,args", [("gaussian", (1.0,)), ("gaussian", (1.3,)),
                                       ("box", (5,)), ("sobel", ())])
@pytest.mark.parametrize("mode", ["reflect", "constant"])
def test_filters_on_it_match_the_reuse_passes(rng, name, args, mode, monkeypatch):
    import cupy as cp

    from xcorr_app.filters import _api, _separable

    stack = cp.asarray((rng.standard_normal((3, 77, 150)) * 10 + 3).astype(np.float32))
    fused = getattr(_api, name)(stack, *args, mode=mode).get()
    monkeypatch.setattr(_separable, "fused_fits", lambda *a, **k: False)
    two = getattr(_api, name)(stack, *args, mode=mode).get()
    np.testing.assert_allclose(fused, two, rtol=1e-5, atol=1e-4)


def test_fits_float32_equal_odd_taps_only():
    class Fake:  # (no GPU needed: the check reads dtype only)
        dtype = np.dtype(np.float32)

    assert fused_fits(Fake(), [1] * 9, [1] * 9)
    assert not fused_fits(Fake(), [1] * 9, [1] * 7)
    assert not fused_fits(Fake(), [1] * 4, [1] * 4)
    assert not fused_fits(Fake(), [1] * 13, [1] * 13)
    assert not fused_fits(Fake(), [1] * 9, [1] * 9, origin=(1, 0))
    assert not fused_fits(np.zeros((2, 2), np.float32), [1] * 3, [1] * 3)
    Fake.dtype = np.dtype(np.uint16)
    assert not fused_fits(Fake(), [1] * 9, [1] * 9)
