"""Zeiss CZI files written by pylibCZIrw (Zeiss's library): every frame read as written, the
shifts of a channel those of the same frames as an array, the pixel size and channel names of
its metadata; a damaged file and a missing library are one error line."""

import subprocess
import sys

import numpy as np
import pytest

from xcorr_app import align
from xcorr_app.io import describe, open_stack, source_path

from cli_helpers import ROOT, assert_clean_error, xcorr
from synthetic import drift_stack

pyczi = pytest.importorskip("pylibCZIrw.czi")


@pytest.fixture(scope="module")
def czi(tmp_path_factory):
    """T=8, C=2, Z=2 uint16: channel 1 the negative of channel 0, plane 1 rolled by 3 rows."""
    stack, _ = drift_stack(np.random.default_rng(13), n=8, shape=(40, 48))
    data = np.stack([stack, stack.max() - stack], axis=1)
    data = np.stack([data, np.roll(data, 3, axis=-2)], axis=2).astype(np.uint16)
    path = tmp_path_factory.mktemp("czi") / "scan.czi"
    with pyczi.create_czi(str(path)) as f:
        for t in range(8):
            for c in range(2):
                for z in range(2):
                    f.write(data=data[t, c, z], plane={"T": t, "C": c, "Z": z})
        f.write_metadata(channel_names={0: "GCaMP", 1: "red"}, scale_x=0.5e-6, scale_y=0.5e-6)
    return path, data


def test_czi_planes_and_shifts_as_the_array(czi):
    path, data = czi
    with open_stack(source_path(path, z=1), channel=1) as src:
        assert (src.format, src.axes, src.n_frames) == ("CZI", "TCZYX", 8)
        np.testing.assert_array_equal(src.read(2, 7), data[2:7, 1, 1])
        assert src.channel_names == ["GCaMP", "red"]
        assert src.pixel_size == pytest.approx((0.5, 0.5, "µm"))
    got = align(source_path(path, z=0), channel=0, device="cpu", chunk_frames=3).shifts
    np.testing.assert_array_equal(got, align(data[:, 0, 0], device="cpu", chunk_frames=3).shifts)
    assert describe(path)["channels"] == 2


def test_bad_czi_is_one_line(tmp_path, czi):
    cut = tmp_path / "cut.czi"
    cut.write_bytes(czi[0].read_bytes()[:2000])
    assert_clean_error(xcorr("align", cut, "--device", "cpu", "--out", tmp_path / "o"), "cut.czi")
    assert not (tmp_path / "o").exists()
    code = ("import sys; sys.modules['pylibCZIrw'] = None; sys.argv[0] = 'xcorr'\n"
            "from xcorr_app.cli import main; main()")
    res = subprocess.run([sys.executable, "-c", code, "info", str(czi[0])], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert_clean_error(res, "pip install 'xcorr-app[czi]'")
