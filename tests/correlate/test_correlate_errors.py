"""Bad arguments to :func:`xcorr_app.cross_correlate` raise InputError, a ValueError (and an
XcorrError, which the command line prints as one line)."""

import numpy as np
import pytest

from xcorr_app import cross_correlate
from xcorr_app.errors import InputError

A, B = np.ones((6, 7)), np.ones((3, 6, 7))


@pytest.mark.parametrize("left, right, kw", [
    (A, A, dict(form="bogus")),
    (A, A, dict(method="bogus")),
    (A, A, dict(method="warp_shuffle:colour=2")),
    (A, A, dict(method="warp_shuffle", device="cpu")),
    (A, A, dict(max_shift=-1)),
    (A, A, dict(max_shift=(1, 2, 3))),
    (A, A, dict(max_shift="two")),
    (A, B, dict(form="one_to_one")),
    (A[None], B, dict(form="n_to_mn")),
    (np.ones((0, 7)), A, {}),
    (A.astype(complex), A, {}),
    (A, np.full((6, 7), "x"), {}),
], ids=["form", "method", "parameter", "gpu-method-on-cpu", "negative-shift", "three-shifts",
        "text-shift", "shape", "n_to_mn-shape", "empty", "complex", "strings"])
def test_bad_arguments_are_value_errors(left, right, kw):
    with pytest.raises(ValueError) as excinfo:
        cross_correlate(left, right, device="cpu", **{k: v for k, v in kw.items()
                                                     if k != "device"})
    assert isinstance(excinfo.value, InputError)
    message = str(excinfo.value)
    assert message and "\n" not in message
