"""refine_planes: planes acquired at different times (an x/y drift along z within each
volume) recovered after the rigid 3-D pass."""

import numpy as np
import pytest
from scipy import ndimage as ndi

from xcorr_app.alignment.volume import align_volumes, refine_planes
from xcorr_app.errors import InputError

from volume_samples import random_shifts, volume


def scanned_stack(vol, shifts, plane_drift, photons, seed=0, margin=6):
    """Each volume moved by its 3-D shift, then each plane z by ``t_frac * plane_drift * z``
    more in (y, x) (later planes drift further: the scan), cropped by ``margin`` in x and y
    (content enters and leaves at the edges, as in a microscope's field), Poisson noise."""
    rng = np.random.default_rng(seed)
    spec = np.fft.fftn(vol)
    out = []
    for t, s in enumerate(shifts):
        moved = np.fft.ifftn(ndi.fourier_shift(spec, s)).real
        for z in range(vol.shape[0]):
            extra = np.asarray(plane_drift) * z * (t / len(shifts))
            moved[z] = np.fft.ifft2(ndi.fourier_shift(np.fft.fft2(moved[z]), extra)).real
        moved = moved[:, margin:-margin, margin:-margin]
        out.append(rng.poisson(np.clip(moved, 0, None) * photons / vol.max()))
    return np.stack(out).astype(np.float32)


def test_plane_drift_recovered():
    vol = volume(("camera", "coins"), depth=16, size=60)
    shifts = random_shifts(4, seed=2, bound=(1.5, 2.5, 2.5))
    drift = (0.08, -0.06)  # px per plane at the last time point's scan
    stack = scanned_stack(vol, shifts, drift, photons=1000.0)
    rigid = align_volumes(stack, device="cpu")
    residual = refine_planes(stack, rigid.shifts, max_shift=3, device="cpu")
    assert residual.shape == (4, 16, 2)
    z = np.arange(16)
    for t in range(1, 4):
        total = rigid.shifts[t, 1:] + residual[t]  # each plane's (dy, dx) to apply
        error = total + shifts[t, 1:] + np.outer(z, drift) * t / 4
        inside = ~np.isnan(error[:, 0])  # (NaN: planes the z shift brought in from outside)
        assert inside.sum() >= 14 and np.isnan(error[~inside]).all()
        assert np.sqrt((error[inside] ** 2).mean()) <= 0.1
    np.testing.assert_allclose(residual[0], 0, atol=0.05)  # the reference's own planes


def test_bad_max_shift():
    with pytest.raises(InputError, match="one bound or two"):
        refine_planes(np.ones((2, 4, 8, 8)), np.zeros((2, 3)), max_shift=(1, 2, 3),
                      device="cpu")
