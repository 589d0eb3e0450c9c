"""Bad arguments to the alignment functions raise InputError, which ``except ValueError`` (the
scikit-image habit) catches as well as ``except XcorrError``."""

import numpy as np
import pytest

from xcorr_app import align, apply_shifts, estimate_shifts
from xcorr_app.errors import InputError, XcorrError

STACK = np.random.default_rng(0).random((3, 16, 16)).astype(np.float32)


@pytest.mark.parametrize("call", [
    lambda: align(STACK, reference="mean:0", device="cpu"),
    lambda: align(STACK, reference=7, device="cpu"),
    lambda: align(STACK, reference="nowhere.tif", device="cpu"),
    lambda: align(STACK, subpixel="cubic", device="cpu"),
    lambda: align(STACK, normalization="mutual", device="cpu"),
    lambda: align(STACK, prefilter="blur:2", device="cpu"),
    lambda: align(STACK, window="kaiser", device="cpu"),
    lambda: align(STACK, chunk_frames=0, device="cpu"),
    lambda: align(STACK, max_memory="lots", device="cpu"),
    lambda: align(STACK, min_confidence=-1, device="cpu"),
    lambda: align(STACK, device="tpu"),
    lambda: align(STACK, max_shift=0, device="cpu"),
    lambda: estimate_shifts(STACK[0], STACK, max_shift=(0, 0), device="cpu"),
    lambda: estimate_shifts(STACK[0], STACK[:, :8], device="cpu"),
    lambda: list(apply_shifts(STACK, np.zeros((2, 2)), device="cpu")),
    lambda: list(apply_shifts(STACK, np.zeros((3, 2)), resample="cubic", device="cpu")),
    lambda: list(apply_shifts(STACK, [[0, 0], [20, 0], [-20, 0]], crop=True, device="cpu")),
], ids=["mean0", "index", "file", "subpixel", "normalization", "prefilter", "window",
        "chunk_frames", "max_memory", "min_confidence", "device", "max_shift0",
        "estimate_max_shift0", "shapes", "shifts", "resample", "crop"])
def test_bad_arguments_are_value_errors(call):
    with pytest.raises(ValueError) as info:
        call()
    assert isinstance(info.value, InputError) and isinstance(info.value, XcorrError)
