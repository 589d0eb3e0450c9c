"""Bounded surfaces band by band (xcorr_app.registration._bands): the whole-frame surface up
to float32 rounding, and the float64 definition, for odd non-square frames and any band
height; phase correlation and unbounded searches have no bands."""

import numpy as np
import pytest

from xcorr_app.correlate import cross_correlate
from xcorr_app.correlate._direct import xcorr_direct
from xcorr_app.errors import InputError
from xcorr_app.registration import Bands, band_plan, banded_surface, zncc

SHAPE = (37, 29)
BOUND = (4, 3)


def _frames(rng, n=3, shape=SHAPE):
    from scipy import ndimage as ndi

    ref = ndi.gaussian_filter(rng.standard_normal(shape), 1.5).astype(np.float32)
    movs = [np.roll(ref, (int(rng.integers(-3, 4)), int(rng.integers(-2, 3))), axis=(0, 1))
            + 0.1 * rng.standard_normal(shape) for _ in range(n)]
    return ref, np.stack(movs).astype(np.float32)


def _whole(ref, mov, normalization):
    form = "n_to_mn" if ref.ndim == 3 else "one_to_many"
    c = cross_correlate(ref, mov[:, None] if form == "n_to_mn" else mov, form, BOUND,
                        device="cpu")
    c = c[:, 0] if form == "n_to_mn" else c
    return zncc(c, ref, mov, BOUND) if normalization == "zncc" else c


@pytest.mark.parametrize("band_rows", [1, 2, 5, 8, 36, 37, 100])
@pytest.mark.parametrize("normalization", ["zncc", "none"])
def test_banded_equals_whole_frame(rng, band_rows, normalization):
    ref, mov = _frames(rng)
    got = banded_surface(ref, mov, BOUND, normalization, band_rows, device="cpu")
    want = _whole(ref, mov, normalization)
    assert got.dtype == np.float32 and got.shape == (3, 9, 7)
    scale = 1.0 if normalization == "zncc" else float(np.abs(want).max())
    np.testing.assert_allclose(got, want, atol=2e-5 * scale, rtol=0)


@pytest.mark.parametrize("band_rows", [1, 6, 11])
@pytest.mark.parametrize("per_frame", [False, True])
def test_banded_equals_the_float64_definition(rng, band_rows, per_frame):
    """Against xcorr_direct in float64 (raw sums, and ZNCC of them), with one reference or
    one per frame (reference="previous")."""
    ref, mov = _frames(rng, shape=(23, 31))
    if per_frame:
        ref = np.stack([ref, mov[0], mov[1]])
        form, right = "n_to_mn", mov[:, None]
    else:
        form, right = "one_to_many", mov
    exact = xcorr_direct(ref.astype(np.float64), right.astype(np.float64), form, BOUND)
    exact = exact[:, 0] if per_frame else exact
    raw = banded_surface(ref, mov, BOUND, "none", band_rows, device="cpu")
    np.testing.assert_allclose(raw, exact, atol=1e-5 * np.abs(exact).max(), rtol=0)
    z = banded_surface(ref, mov, BOUND, "zncc", band_rows, device="cpu")
    np.testing.assert_allclose(z, zncc(exact, ref.astype(np.float64),
                                       mov.astype(np.float64), BOUND), atol=2e-5, rtol=0)


def test_a_fixed_plan_serves_every_band(rng):
    ref, mov = _frames(rng)
    plan = band_plan(ref, mov, BOUND, 5, device="cpu")
    for method in (plan, "fft", "direct"):
        got = banded_surface(ref, mov, BOUND, "zncc", 5, device="cpu", method=method)
        np.testing.assert_allclose(got, _whole(ref, mov, "zncc"), atol=2e-5, rtol=0)
    assert str(Bands(5, plan)) == f"bands:rows=5,{plan}"


@pytest.mark.parametrize("kw,msg", [(dict(normalization="phase"), "no bands"),
                                    (dict(max_shift=None), "bounded"),
                                    (dict(band_rows=0), "band_rows")])
def test_what_has_no_bands_is_refused(rng, kw, msg):
    ref, mov = _frames(rng)
    args = dict(max_shift=BOUND, normalization="zncc", band_rows=4) | kw
    with pytest.raises(InputError, match=msg):
        banded_surface(ref, mov, args["max_shift"], args["normalization"], args["band_rows"],
                       device="cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("band_rows", [1, 7, 64])
@pytest.mark.parametrize("normalization", ["zncc", "none"])
def test_gpu_banded_equals_the_float64_definition(rng, band_rows, normalization):
    """CuPy arrays in, CuPy out: the GPU's kernels per band against the float64 definition."""
    import cupy as cp

    ref, mov = _frames(rng, n=4, shape=(61, 47))
    got = banded_surface(cp.asarray(ref), cp.asarray(mov), BOUND, normalization, band_rows)
    assert isinstance(got, cp.ndarray) and got.dtype == cp.float32
    exact = xcorr_direct(ref.astype(np.float64), mov.astype(np.float64), "one_to_many", BOUND)
    if normalization == "zncc":
        exact = zncc(exact, ref.astype(np.float64), mov.astype(np.float64), BOUND)
        atol = 5e-5
    else:
        atol = 2e-5 * np.abs(exact).max()
    np.testing.assert_allclose(cp.asnumpy(got), exact, atol=atol, rtol=0)
