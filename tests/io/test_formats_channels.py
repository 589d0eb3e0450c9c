"""``xcorr align --channel K --apply-to all|LIST``: the shifts measured on channel K move every
listed channel, written as one hyperstack (TIFF, OME-Zarr, HDF5) whose second channel is the
known warp of its frames; the same as ``AlignResult.apply`` per channel in the API."""

import numpy as np
import pytest
import tifffile

from xcorr_app import align, apply_shifts
from xcorr_app.io import open_stack

from cli_helpers import assert_clean_error, xcorr
from synthetic import drift_stack


@pytest.fixture(scope="module")
def two_channels(tmp_path_factory):
    """A TCYX ImageJ hyperstack: channel 0 drifts by a known amount, channel 1 is another
    picture (coins) moved by the same drift; and the truth."""
    stack, truth = drift_stack(np.random.default_rng(11), n=8, shape=(56, 64), max_shift=4)
    from scipy import ndimage as ndi
    from skimage import data

    coins = ndi.gaussian_filter(data.coins().astype(np.float64), 1.0)[40:40 + 56 + 16,
                                                                       60:60 + 64 + 16]
    moved = np.array([ndi.shift(coins, -t, order=3, mode="reflect")[8:64, 8:72]
                      for t in truth])  # frame i moved by -truth[i]: aligns by truth[i]
    second = np.clip(moved, 0, 65535).astype(np.uint16)
    path = tmp_path_factory.mktemp("in") / "two.tif"
    tifffile.imwrite(path, np.stack([stack, second], axis=1), imagej=True,
                     metadata={"axes": "TCYX"})
    return path, second, truth


@pytest.mark.parametrize("fmt, name", [("tiff", "aligned.tif"), ("hdf5", "aligned.h5"),
                                       ("ome-zarr", "aligned.ome.zarr")])
def test_apply_to_all_aligns_the_second_channel_by_the_firsts_shifts(tmp_path, two_channels,
                                                                     fmt, name):
    if fmt != "tiff":
        pytest.importorskip({"hdf5": "h5py", "ome-zarr": "zarr"}[fmt])
    path, second, truth = two_channels
    res = xcorr("align", path, "--channel", "0", "--apply-to", "all", "--device", "cpu",
                "--out", tmp_path / "o", "--out-format", fmt, "--quiet", "--crop")
    assert res.returncode == 0, res.stderr
    result = align(str(path), channel=0, device="cpu")
    with open_stack(tmp_path / "o" / name, channel=1) as out:
        assert out.n_channels == 2 and out.n_frames == 8
        got = out.read(0, 8)
    # the API's per-channel apply gives the same frames
    want = np.concatenate([c for _, c in result.apply(str(path), channel=1, crop=True)])
    np.testing.assert_array_equal(got, want)
    # and they are aligned: measured again, the frames of channel 1 hardly move
    np.testing.assert_allclose(np.abs(align(got, device="cpu").shifts).max(), 0, atol=0.25)
    before = np.abs(align(second, device="cpu").shifts - truth).max()
    assert before < 0.25  # (the known warp of channel 1 is the truth)


@pytest.mark.parametrize("args, words", [
    (["--apply-to", "all"], ["pass --channel"]),
    (["--channel", "0", "--apply-to", "0,5"], ["5 is not one of its channels 0 to 1"]),
    (["--channel", "0", "--apply-to", "x"], ["all or channel numbers"]),
    (["--channel", "0", "--apply-to", "all", "--no-aligned"], ["--no-aligned"]),
])
def test_bad_apply_to_is_one_line(tmp_path, two_channels, args, words):
    res = xcorr("align", two_channels[0], "--device", "cpu", "--out", tmp_path / "o", *args)
    assert_clean_error(res, *words)
    assert not (tmp_path / "o").exists()


def test_apply_shifts_is_the_api_of_one_channel(two_channels):
    path, second, _ = two_channels
    result = align(str(path), channel=0, device="cpu")
    a = np.concatenate([c for _, c in apply_shifts(second, result.shifts)])
    b = np.concatenate([c for _, c in result.apply(str(path), channel=1)])
    np.testing.assert_array_equal(a, b)
