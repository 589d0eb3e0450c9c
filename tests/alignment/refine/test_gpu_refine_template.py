"""The template's side of the fused refinement (``kernels/alignment/refine_surfaces.cu``
``refine_template``, launched by ``_refine_gpu.refine_template_gpu``) against NumPy's
``_patches.tapered`` and ``normalize.zncc_left`` for +-1 px, in float64.

Sizes: patches of one pixel, smaller than a warp, odd and non-square, one wider and one with
more pixels than the block's 256 threads; random tapers and none; a constant patch (the bad
flag); tapered patches within 1 float32 ulp-scale of NumPy's (the mean rounded to float32 may
differ by an ulp: its float64 sum runs in another order), the sums within float64 rounding."""

import numpy as np
import pytest

from xcorr_app.alignment.piecewise._refine_gpu import refine_template_gpu
from xcorr_app.alignment.piecewise._patches import refine_left, refine_template, tapered
from xcorr_app.errors import InputError
from xcorr_app.registration import zncc_left

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (3, 2, 2), (5, 7, 13), (2, 3, 300), (4, 37, 29), (1, 143, 143)]


def _want(tp, taper):
    tnear = tapered(tp, taper)
    left = zncc_left(tnear, (1, *tp.shape[-2:]), 1)
    return tnear, left


def _check(got_tnear, got_sums, tnear, left):
    mean, var, bad = (a.get() for a in got_sums)
    scale = float(np.abs(tnear).max()) + 1e-30
    np.testing.assert_allclose(got_tnear.get(), tnear, rtol=0, atol=4e-7 * scale)
    n = np.broadcast_to(left.n, mean.shape)
    np.testing.assert_allclose(mean, np.broadcast_to(left.mean, mean.shape), rtol=0,
                               atol=1e-6 * scale)
    sum2 = (tnear.astype(np.float64) ** 2).sum(axis=(1, 2))[:, None, None]
    err = np.abs(var - np.broadcast_to(left.var, var.shape))
    assert (err <= 1e-9 * sum2 + 1e-30).all(), float((err / (sum2 + 1e-30)).max())
    np.testing.assert_array_equal(bad, np.broadcast_to(left.bad, bad.shape))
    assert n.shape == mean.shape


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_taper", [True, False])
def test_refine_template_matches_numpy(rng, shape, with_taper):
    import cupy as cp

    tp = (rng.standard_normal(shape) * 50 + 200).astype(np.float32)
    if shape[0] > 2:
        tp[1] = 7.0  # a constant patch: bad at every shift
    taper = rng.uniform(0.1, 1.0, shape[1:]).astype(np.float32) if with_taper else None
    tnear, left = _want(tp, taper)
    got_tnear, sums, g_taper = refine_template_gpu(cp.asarray(tp), taper)
    _check(got_tnear, sums, tnear, left)
    if shape[0] > 2:
        assert sums[2].get()[1].all()
    if with_taper:
        np.testing.assert_array_equal(g_taper.get(), taper)
    else:
        assert g_taper is None


@pytest.mark.parametrize("shape", SHAPES[2:4])
def test_refine_left_of_tapered_patches_takes_them_as_they_are(rng, shape):
    """refine_left (GPU) of patches already tapered: their sums, the taper only uploaded; and
    refine_template gives the pair both devices use."""
    import cupy as cp

    tp = (rng.standard_normal(shape) * 3 - 1).astype(np.float32)
    taper = rng.uniform(0.1, 1.0, shape[1:]).astype(np.float32)
    tnear = tapered(tp, taper)
    sums, g_taper = refine_left(cp.asarray(tnear), taper)
    _check(cp.asarray(tnear), sums, tnear, zncc_left(tnear, (1, *shape[1:]), 1))
    np.testing.assert_array_equal(g_taper.get(), taper)
    g_tnear, (g_sums, _) = refine_template(cp.asarray(tp), taper)
    c_tnear, c_left = refine_template(tp, taper)
    _check(g_tnear, g_sums, c_tnear, c_left)


def test_bad_arguments_are_input_errors():
    import cupy as cp

    with pytest.raises(InputError, match="taper"):
        refine_template_gpu(cp.ones((2, 5, 6), cp.float32), np.ones((5, 5), np.float32))
    with pytest.raises(InputError, match="non-empty"):
        refine_template_gpu(cp.ones((0, 5, 6), cp.float32), None)
    with pytest.raises(InputError, match="non-empty"):
        refine_template_gpu(cp.ones((5, 6), cp.float32), None)
