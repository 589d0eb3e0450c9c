"""phase_cross_correlation names what it found: NaN or infinite values."""

import numpy as np
import pytest

from xcorr_app.errors import InputError
from xcorr_app.registration import phase_cross_correlation


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_input_is_named(rng, value):
    ref = rng.random((16, 16))
    mov = ref.copy()
    mov[3, 4] = value
    with pytest.raises(InputError, match="NaN or infinite values"):
        phase_cross_correlation(ref, mov)
