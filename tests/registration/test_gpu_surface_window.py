"""GpuSurfaces' fft plan at the window of shifts (correlate/_fft_window.py) against the float64
definition and against its whole inverse: surfaces at least as close to float64, the same
peaks."""

import numpy as np
import pytest

from xcorr_app.correlate import Plan, xcorr_fft
from xcorr_app.registration import GpuSurfaces, zncc

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("shape,bound,normalization,mean", [
    ((130, 97), (14, 14), "zncc", 0.5),   # frames whose mean is 12x their deviation
    ((130, 97), (14, 14), "zncc", 0.0),
    ((61, 83), (5, 9), "none", 0.0),
    ((40, 33), (3, 1), "zncc", 0.5),
])
def test_window_and_whole_inverse_agree(rng, shape, bound, normalization, mean):
    import cupy as cp
    from scipy import ndimage as ndi

    canvas = ndi.gaussian_filter(rng.random((shape[0] + 40, shape[1] + 40)), 2.0)
    canvas = canvas - canvas.mean() + mean
    ref = canvas[20:20 + shape[0], 20:20 + shape[1]].astype(np.float32)
    shifts = rng.integers(-min(bound), min(bound) + 1, size=(9, 2))
    frames = np.stack([canvas[20 + dy:20 + dy + shape[0], 20 + dx:20 + dx + shape[1]]
                       for dy, dx in shifts])
    frames = (frames + 0.01 * rng.standard_normal(frames.shape)).astype(np.float32)
    raw = xcorr_fft(ref.astype(np.float64), frames.astype(np.float64), "one_to_many",
                    max_shift=bound, dtype=np.float64)
    want = zncc(raw, ref.astype(np.float64), frames.astype(np.float64), max_shift=bound) \
        if normalization == "zncc" else raw
    g = GpuSurfaces(shape, bound, normalization)
    assert g.window
    ref_g, mov = cp.asarray(ref), cp.asarray(frames)
    z, iy, ix, peak, conf = (a.get() for a in g(ref_g, mov, Plan("fft"), None))
    g.window = False  # the whole inverse, read circularly
    z0, iy0, ix0, peak0, conf0 = (a.get() for a in g(ref_g, mov, Plan("fft"), None))
    unit = 1.0 if normalization == "zncc" else np.abs(want).max()
    err, err0 = np.abs(z - want).max() / unit, np.abs(z0 - want).max() / unit
    assert err <= max(1.5 * err0, 2e-6), (err, err0)
    np.testing.assert_array_equal(iy, iy0)
    np.testing.assert_array_equal(ix, ix0)
    np.testing.assert_allclose(conf, conf0, rtol=1e-3)
    if normalization == "zncc":  # c[k] = sum ref[q + k] frame[q], frame[q] = ref[q + shift]
        np.testing.assert_array_equal(np.stack([iy, ix], 1) - np.array(bound), shifts)
