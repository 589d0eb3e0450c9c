"""The weights behind the filtered frames' means of the GPU preparation
(``_frame_stats.reflect_weights``) against scipy.ndimage (no GPU needed)."""

import numpy as np


def test_reflect_weights_are_the_column_sums_of_the_correlation():
    """Each sample's weight in the output of scipy.ndimage.correlate1d (mode reflect), for lines
    shorter than the taps (the reflection repeats) and longer."""
    import scipy.ndimage as ndi

    from xcorr_app.alignment.rigid._frame_stats import reflect_weights

    for taps in (np.array([0.2, 0.5, 0.3]), np.linspace(0.1, 0.9, 9), np.arange(1.0, 12.0)):
        for n in list(range(1, 14)) + [64, 97]:
            c = ndi.correlate1d(np.eye(n), taps, axis=0, mode="reflect")  # column j: of e_j
            np.testing.assert_allclose(reflect_weights(taps, n), c.sum(axis=0), rtol=1e-12,
                                       err_msg=f"{len(taps)} taps, n={n}")
