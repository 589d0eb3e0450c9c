"""The motion field's spline (alignment/piecewise/_spline.py): the weights against SciPy's natural cubic
spline, the GPU's kept weights."""
import numpy as np
import pytest

from xcorr_app.alignment.piecewise import field_weights, spline_weights


def _scipy_spline_weights(c, n):
    """The weights by scipy's natural CubicSpline, linear beyond the ends (the definition)."""
    from scipy.interpolate import CubicSpline

    g, x = len(c), np.arange(n, dtype=np.float64)
    if g == 1:
        return np.ones((n, 1))
    spline = CubicSpline(c, np.eye(g), bc_type="natural", axis=0)
    w = spline(np.clip(x, c[0], c[-1]))
    d = spline(c[[0, -1]], 1)
    return w + np.where(x < c[0], x - c[0], 0.0)[:, None] * d[0] + \
        np.where(x > c[-1], x - c[-1], 0.0)[:, None] * d[1]


@pytest.mark.parametrize("g", [1, 2, 3, 4, 7, 16])
@pytest.mark.parametrize("n", [1, 33, 301])
def test_spline_weights_are_scipy_s_natural_cubic_spline(g, n):
    """Even and uneven centres, inside and beyond the frame, against CubicSpline."""
    rng = np.random.default_rng([g, n])
    for c in (np.linspace(0.4 * n / g, n - 0.4 * n / g, g) if g > 1 else np.array([n / 2]),
              np.sort(rng.uniform(-20, n + 20, g)) + np.arange(g) * 3.0):
        got = spline_weights(c, n)
        assert got.shape == (n, g)
        np.testing.assert_allclose(got, _scipy_spline_weights(c, n), rtol=0, atol=1e-11)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=0, atol=1e-11)  # constants kept


@pytest.mark.gpu
def test_gpu_weights_carry_what_the_kernels_read():
    """On the GPU the weights are kept per grid and device, with ``wx`` transposed."""
    import cupy as cp

    centres = np.stack(np.meshgrid([10.0, 30.0, 52.0], [8.5, 40.5], indexing="ij"), -1)
    w = field_weights(centres, (61, 79), cp)
    assert field_weights(centres, (61, 79), cp) is w  # (kept)
    wy, wx = w
    np.testing.assert_array_equal(wy.get(), spline_weights([10.0, 30.0, 52.0], 61))
    np.testing.assert_array_equal(w.wx_t.get(), wx.get().T)
    assert w.wx_t.flags.c_contiguous
