"""Code written for scikit-image catches ``ValueError``: every bad-argument error of the public
API is an :class:`~xcorr_app.errors.InputError`, which is both an ``XcorrError`` and a
``ValueError``."""

import numpy as np
import pytest

import xcorr_app
from xcorr_app import filters
from xcorr_app.errors import InputError, OutputError, XcorrError

IMG = np.random.default_rng(22).random((24, 20))
NAN = IMG.copy()
NAN[3, 4] = np.nan

BAD_CALLS = {
    "pcc space": lambda: xcorr_app.phase_cross_correlation(IMG, IMG, space="bogus"),
    "pcc normalization": lambda: xcorr_app.phase_cross_correlation(IMG, IMG,
                                                                   normalization="bogus"),
    "pcc shapes": lambda: xcorr_app.phase_cross_correlation(IMG, IMG[:, :-1]),
    "pcc nan": lambda: xcorr_app.phase_cross_correlation(IMG, NAN),
    "pcc upsample": lambda: xcorr_app.phase_cross_correlation(IMG, IMG, upsample_factor=0),
    "xcorr form": lambda: xcorr_app.cross_correlate(IMG, IMG, form="bogus"),
    "xcorr method": lambda: xcorr_app.cross_correlate(IMG, IMG, method="bogus"),
    "xcorr max_shift": lambda: xcorr_app.cross_correlate(IMG, IMG, max_shift=-1),
    "xcorr device": lambda: xcorr_app.cross_correlate(IMG, IMG, device="tpu"),
    "xcorr ndim": lambda: xcorr_app.cross_correlate(IMG[0], IMG),
    "gaussian mode": lambda: filters.gaussian(IMG, 1.0, mode="bogus"),
    "gaussian sigma": lambda: filters.gaussian(IMG, -1.0),
    "box size": lambda: filters.box(IMG, 0),
    "correlate2d weights": lambda: filters.correlate2d(IMG, np.ones(3)),
    "dog sigmas": lambda: filters.dog(IMG, 4.0, 1.0),
    "kernel spec": lambda: filters.parse_kernel_spec("bogus:1"),
    "conv2d shapes": lambda: xcorr_app.conv2d(np.ones((1, 2, 8, 8)), np.ones((3, 4, 3, 3))),
    "conv2d stride": lambda: xcorr_app.conv2d(np.ones((1, 2, 8, 8)), np.ones((3, 2, 3, 3)),
                                              stride=0),
    "conv2d method": lambda: xcorr_app.conv2d(np.ones((1, 2, 8, 8)), np.ones((3, 2, 3, 3)),
                                              method="bogus"),
    "pointwise shapes": lambda: xcorr_app.pointwise(np.ones((1, 2, 8, 8)), np.ones((3, 4))),
    "estimate_shifts subpixel": lambda: xcorr_app.estimate_shifts(IMG, IMG[None],
                                                                  subpixel="bogus"),
    "estimate_shifts shapes": lambda: xcorr_app.estimate_shifts(IMG, IMG[None, :, :-1]),
    "align reference": lambda: xcorr_app.align(np.stack([IMG, IMG]), reference="bogus"),
    "align missing file": lambda: xcorr_app.align("/nonexistent/stack.tif"),
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_bad_arguments_raise_value_error(name):
    with pytest.raises(ValueError) as info:
        BAD_CALLS[name]()
    assert isinstance(info.value, InputError), type(info.value)
    assert "\n" not in str(info.value).strip()  # one line, for the CLI's error: ...


def test_error_classes():
    assert issubclass(InputError, XcorrError) and issubclass(InputError, ValueError)
    assert issubclass(OutputError, XcorrError) and not issubclass(OutputError, ValueError)
