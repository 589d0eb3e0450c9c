"""Filter banks and channel mixes: the weights, xcorr filter --bank/--mix, align --features."""

import numpy as np
import pytest
import tifffile

from sample_paths import stack_path, truth
from cli_helpers import assert_clean_error, xcorr
from xcorr_app import align
from xcorr_app.filters import bank_weights, feature_prefilter
from xcorr_app.filters._banks import mix_weights
from xcorr_app.errors import XcorrError
from xcorr_app.conv._reference import conv2d_reference


def test_named_banks():
    dog = bank_weights("dog:1,1.5,2", 2)
    assert dog.shape == (2, 2, 17, 17) and dog.dtype == np.float32
    np.testing.assert_allclose(dog.sum(axis=(1, 2, 3)), 0, atol=1e-6)  # band-pass
    np.testing.assert_array_equal(dog[:, 0], dog[:, 1])  # on the mean of the channels
    gab = bank_weights("gabor:2,6,5", 1)
    assert gab.shape == (6, 1, 17, 17)
    np.testing.assert_allclose(gab.sum(axis=(1, 2, 3)), 0, atol=1e-6)
    assert not np.allclose(gab[0], gab[1])  # orientations differ
    assert bank_weights("dog:10,20", 1).shape[-1] == 31  # capped


def test_file_banks_and_mixes(tmp_path):
    np.save(tmp_path / "b3.npy", np.ones((4, 5, 5)))
    np.save(tmp_path / "b4.npy", np.ones((4, 3, 5, 5)))
    np.save(tmp_path / "even.npy", np.ones((4, 4, 4)))
    np.save(tmp_path / "m.npy", np.array([[1.0, 2.0, 3.0], [0, 0, 1]]))
    assert bank_weights(str(tmp_path / "b3.npy"), 3).shape == (4, 3, 5, 5)
    assert bank_weights(str(tmp_path / "b4.npy"), 3).shape == (4, 3, 5, 5)
    with pytest.raises(XcorrError, match="odd size"):
        bank_weights(str(tmp_path / "even.npy"), 1)
    with pytest.raises(XcorrError, match=r"expected \(F, 2, K, K\)"):
        bank_weights(str(tmp_path / "b4.npy"), 2)
    assert mix_weights(str(tmp_path / "m.npy"), 3).shape == (2, 3)
    with pytest.raises(XcorrError, match="needs 3 channels"):
        mix_weights("luma", 2)
    for bad in ("dog:1", "dog:x", "gabor:2", "gabor:2,1.5", "sobel:3", str(tmp_path / "no.npy")):
        with pytest.raises(XcorrError):
            bank_weights(bad, 1)


def test_cli_bank_writes_one_channel_per_filter(tmp_path):
    path = stack_path("cell")
    out = tmp_path / "dog.tif"
    res = xcorr("filter", path, "--bank", "dog:1,2,4", "--device", "cpu", "--out", out)
    assert res.returncode == 0, res.stderr
    got = tifffile.imread(out)
    stack = tifffile.imread(path).astype(np.float64)
    assert got.shape == (len(stack), 2, *stack.shape[1:]) and got.dtype == np.float32
    w = bank_weights("dog:1,2,4", 1)
    want = conv2d_reference(stack[:, None], w, padding=w.shape[-1] // 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
    with tifffile.TiffFile(out) as t:
        assert t.series[0].axes == "TCYX"


def test_cli_mix_of_a_three_channel_stack(tmp_path, rng):
    rgb = rng.integers(0, 255, (5, 3, 20, 30), dtype=np.uint8)
    path = tmp_path / "rgb.tif"
    tifffile.imwrite(path, rgb, imagej=True, metadata={"axes": "TCYX"})
    out = tmp_path / "luma.tif"
    res = xcorr("filter", path, "--mix", "luma", "--device", "cpu", "--out", out)
    assert res.returncode == 0, res.stderr
    got = tifffile.imread(out)
    want = np.tensordot(rgb.astype(np.float64), [0.299, 0.587, 0.114], axes=([1], [0]))
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5)


def test_cli_bank_and_mix_errors(tmp_path):
    path = stack_path("cell")
    for args, words in [(("--kernel", "box:3", "--bank", "dog:1,2"), "exactly one of"),
                        ((), "exactly one of"),
                        (("--bank", "dog:1,2", "--gpus", "0", "--workers", "2"),
                         "either --gpus or --workers"),
                        (("--mix", "luma"), "needs 3 channels"),
                        (("--bank", "dog:1,2", "--channel", "0"), "drop --channel"),
                        (("--bank", "gabor:x"), "cannot parse bank")]:
        assert_clean_error(xcorr("filter", path, *args, "--out", tmp_path / "o.tif"), words)
    assert not (tmp_path / "o.tif").exists()
    for args, words in [(("--features", "dog:1"), "at least two sigmas"),
                        (("--reference", "mean:x"), "mean:N takes a number")]:
        assert_clean_error(xcorr("align", path, *args, "--out", tmp_path / "a"), words)
        assert not (tmp_path / "a").exists()  # nothing made before the check


def test_align_on_features_recovers_the_drift():
    res = align(stack_path("cell"), max_shift=12, device="cpu", features="dog:1,2,4")
    err = res.shifts - truth("cell")
    assert np.sqrt((err ** 2).mean()) <= 0.1
    assert res.settings["features"] == "dog:1,2,4"


def test_feature_prefilter_is_the_bank_energy(rng):
    frames = rng.random((2, 24, 31)).astype(np.float32)
    got = feature_prefilter("gabor:1.5,3")(frames)
    w = bank_weights("gabor:1.5,3", 1)
    resp = conv2d_reference(frames[:, None], w, padding=w.shape[-1] // 2)
    np.testing.assert_allclose(got, np.sqrt((resp ** 2).sum(axis=1)), rtol=1e-4, atol=1e-5)


def test_cli_bank_on_two_dask_workers_equals_one_process(tmp_path, rng):
    pytest.importorskip("dask.distributed")  # (not tests/distributed)
    rgb = rng.integers(0, 255, (7, 3, 20, 30), dtype=np.uint8)
    path = tmp_path / "rgb.tif"
    tifffile.imwrite(path, rgb, imagej=True, metadata={"axes": "TCYX"})
    outs = []
    for extra in ((), ("--workers", "2")):
        for spec in (("--bank", "gabor:1.5,3"), ("--mix", "luma")):
            out = tmp_path / f"{spec[0][2:]}{len(extra)}.tif"
            res = xcorr("filter", path, *spec, "--device", "cpu", "--out", out, *extra)
            assert res.returncode == 0, res.stderr
            outs.append(tifffile.imread(out))
    np.testing.assert_array_equal(outs[0], outs[2])
    np.testing.assert_array_equal(outs[1], outs[3])
    assert outs[0].shape == (7, 3, 20, 30) and outs[1].shape == (7, 20, 30)


def test_dask_filter_channels_of_a_dask_array(rng):
    da = pytest.importorskip("dask.array")
    from xcorr_app.dask import filter_channels

    x = rng.standard_normal((5, 2, 11, 13)).astype(np.float32)
    got = filter_channels(da.from_array(x, chunks=(2, 1, 11, 13)), bank="dog:1,2",
                          device="cpu").compute(scheduler="sync")
    w = bank_weights("dog:1,2", 2)
    np.testing.assert_allclose(got, conv2d_reference(x, w, padding=w.shape[-1] // 2),
                               rtol=1e-5, atol=1e-5)
