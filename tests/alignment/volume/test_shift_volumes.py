"""shift_volumes: each volume moved by its shift, one at a time, the input unchanged."""

import numpy as np
import pytest

from xcorr_app.alignment.volume import align_volumes, shift_volumes
from xcorr_app.errors import InputError

from volume_samples import shifted_stack, volume


def test_aligned_volumes_match_the_reference():
    true = np.array([[0, 0, 0], [1.0, -2.0, 1.0], [0.5, 1.5, -0.5]])
    stack = shifted_stack(volume(depth=16, size=32), true, photons=1e5)
    before = stack.copy()
    result = align_volumes(stack, device="cpu")
    aligned = list(shift_volumes(stack, result.shifts, device="cpu"))
    np.testing.assert_array_equal(stack, before)
    inner = (slice(3, -3),) * 3  # (the moved-in edges are the fill)
    whole = np.abs(stack[2][inner] - stack[0][inner]).mean()
    for vol in aligned[1:]:
        assert vol.dtype == np.float32
        assert np.abs(vol[inner] - stack[0][inner]).mean() < 0.2 * whole
    np.testing.assert_allclose(aligned[0], stack[0], rtol=1e-4, atol=1e-3)  # (shift ~1e-9)


@pytest.mark.parametrize("shifts", [[[0, 0, 0]], np.zeros((2, 2)), [[0, 0, np.nan]] * 2])
def test_bad_shifts(shifts):
    with pytest.raises(InputError, match="one finite"):
        next(shift_volumes(np.zeros((2, 4, 4, 4)), shifts, device="cpu"))


@pytest.mark.gpu
def test_gpu_matches_cpu():
    stack = shifted_stack(volume(depth=8, size=16), [[0, 0, 0], [1, 0.5, -1]], photons=1e3)
    shifts = [[0, 0, 0], [-1, -0.5, 1]]
    for cpu, gpu in zip(shift_volumes(stack, shifts, device="cpu"),
                        shift_volumes(stack, shifts, device="gpu")):
        np.testing.assert_allclose(gpu, cpu, atol=1e-3)
