"""The batched mode of surface_peaks (kernels/registration/zncc_peaks.cu): P left matrices, each
against its own N right ones (the patch pass's ``n_to_mn`` layout ``(P, N, Ho, Wo)``
flattened), against normalize.zncc and peaks.find_shifts on the CPU in float64.

Tolerances: the surfaces within 1e-5 (ZNCC in [-1, 1]; float32 results of float64 sums added
in another order), the integer peaks identical, the peak values within 1e-5, the confidences
within 1e-4 relative, the subpixel shifts (the rigid path's ``refined_shifts`` on the GPU's
surfaces) within 1e-4 px."""

import numpy as np
import pytest
from scipy import ndimage as ndi

from conftest import poisoned, rel_error
from xcorr_app.correlate import first_shift
from xcorr_app.correlate._direct import xcorr_direct
from xcorr_app.registration import ZnccLeft, find_shifts, refined_shifts, zncc, zncc_left
from xcorr_app.registration._peaks import confidence

pytestmark = pytest.mark.gpu


def patches_and_views(rng, p, n, shape, d, flat=False):
    """``P`` smooth patches ``(P, h, w)`` and for each ``N`` noisy views shifted by up to ``d``
    ``(P, N, h, w)``, float32; with ``flat`` the last patch and one view are constant (zero
    variance: the CPU's ZNCC reads -1 at every shift there)."""
    h, w = shape
    left, right = [], []
    for _ in range(p):
        base = ndi.gaussian_filter(rng.standard_normal((h + 2 * d, w + 2 * d)), 1.2)
        left.append(base[d:d + h, d:d + w])
        views = []
        for _ in range(n):
            dy, dx = rng.integers(-d, d + 1, 2)
            f = base[d + dy:d + dy + h, d + dx:d + dx + w]
            views.append(f + 0.05 * rng.standard_normal(f.shape))
        right.append(views)
    left, right = np.asarray(left, np.float32), np.asarray(right, np.float32)
    if flat:
        left[-1] = 2.5
        right[0, n // 2] = 0.0
    return left, right


def cpu_zncc(corr, left, right, d):
    """The definition in float64: normalize.zncc of patch ``p`` against its views (the left
    part per patch, broadcast over the views, as alignment/piecewise/_patches.py does on the CPU)."""
    left, right = left.astype(np.float64), right.astype(np.float64)
    part = zncc_left(left, right.shape, d)
    per = ZnccLeft(part.n, part.mean[:, None], part.var[:, None], part.bad[:, None])
    return zncc(corr.astype(np.float64), left, right, d, left_part=per)


@pytest.mark.parametrize("shape", [(9, 13), (17, 11)])
@pytest.mark.parametrize("d", [1, 4])
@pytest.mark.parametrize("p", [1, 7])
@pytest.mark.parametrize("n", [5, 300])
def test_batched_zncc_peaks_match_the_float64_cpu(rng, monkeypatch, shape, d, p, n):
    import cupy as cp
    from xcorr_app.registration import _surfaces
    from xcorr_app.registration import summed_area_tables, surface_peaks

    if n > 256:  # several launches of at most MAX_GRID_Y frames (f0 > 0 read right)
        monkeypatch.setattr(_surfaces, "MAX_GRID_Y", 97)
    left, right = patches_and_views(rng, p, n, shape, d, flat=p > 1)
    corr = xcorr_direct(left, right, "n_to_mn", d).astype(np.float32)  # (P, N, Ho, Wo)
    ho, wo = corr.shape[-2:]
    assert (ho, wo) == (2 * d + 1, 2 * d + 1)
    want = cpu_zncc(corr, left, right, d)
    w_s, w_peak, w_conf, w_iy, w_ix = find_shifts(want, (d, d), "gaussian", return_index=True)

    out = poisoned(cp, (p * n, ho, wo))
    flat_right = cp.asarray(right.reshape(p * n, *shape))
    got = surface_peaks(cp.asarray(corr.reshape(p * n, ho, wo)), shape,
                        first_shift(shape, shape, d),
                        left_tables=summed_area_tables(cp.asarray(left), bound_rows=d),
                        right_tables=summed_area_tables(flat_right, bound_rows=d), out=out)
    assert got[0] is out
    z, iy, ix, peak, conf = (a.get() for a in got)
    assert rel_error(z, want.reshape(p * n, ho, wo)) <= 1e-5
    np.testing.assert_array_equal(iy.reshape(p, n), w_iy)
    np.testing.assert_array_equal(ix.reshape(p, n), w_ix)
    np.testing.assert_allclose(peak.reshape(p, n), w_peak, rtol=0, atol=1e-5)
    np.testing.assert_allclose(conf.reshape(p, n), w_conf, rtol=1e-4)
    # the confidence rule on the GPU's own surface: exactly peaks.confidence
    np.testing.assert_allclose(conf, confidence(z, iy, ix), rtol=1e-12)
    for method in ("gaussian", "parabolic3"):
        s = refined_shifts(got[0], got[1], got[2], (d, d), method).get()
        ws = find_shifts(want, (d, d), method)[0]
        np.testing.assert_allclose(s.reshape(p, n, 2), ws, rtol=0, atol=1e-4)
    if p > 1:  # the flat patch and the flat view: -1 everywhere, a constant surface
        for f in [(p - 1) * n + k for k in range(n)] + [n // 2]:
            assert (z[f] == -1.0).all() and conf[f] == 1.0 and iy[f] == ix[f] == 0


def test_batched_tables_must_divide_the_surfaces(rng):
    import cupy as cp
    from xcorr_app.errors import InputError
    from xcorr_app.registration import summed_area_tables, surface_peaks

    left, right = patches_and_views(rng, 3, 4, (9, 9), 1)
    corr = cp.asarray(xcorr_direct(left, right, "n_to_mn", 1).astype(np.float32))
    tables = summed_area_tables(cp.asarray(right.reshape(12, 9, 9)), bound_rows=1)
    with pytest.raises(InputError, match="divisor"):
        surface_peaks(corr.reshape(12, 3, 3), (9, 9), (-1, -1),
                      left_tables=summed_area_tables(cp.asarray(left[:1].repeat(5, 0)),
                                                     bound_rows=1),
                      right_tables=tables)
