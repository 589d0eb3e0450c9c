"""Nikon ND2 files (laid out as version 3.0 files are: nd2_files.py), read by the nd2 package:
every frame read as written, the shifts of a channel those of the same frames as an array, the
Z planes of a 5-D file, positions by name, an acquisition stopped early, the pixel size and
channel names of its metadata, the command line; damaged and RGB files, several positions and
none named, and a missing library are one error line."""

import subprocess
import sys

import numpy as np
import pytest

from xcorr_app import align
from xcorr_app.io import describe, open_stack, source_path

from cli_helpers import ROOT, assert_clean_error, xcorr
from nd2_files import write_nd2
from synthetic import drift_stack

pytest.importorskip("nd2")


@pytest.fixture(scope="module")
def nd2_file(tmp_path_factory):
    """T=8, C=2 uint16 (channel 1 the negative of channel 0) and T=6, Z=3, C=2."""
    stack, _ = drift_stack(np.random.default_rng(13), n=8, shape=(40, 48))
    data = np.stack([stack, stack.max() - stack], axis=1).astype(np.uint16)
    folder = tmp_path_factory.mktemp("nd2")
    write_nd2(folder / "scan.nd2", data, ["GCaMP", "red"], pixel_um=0.325)
    volumes = np.stack([np.roll(data[:6], k, axis=-1) for k in range(3)], axis=1)
    write_nd2(folder / "stack.nd2", volumes, ["GCaMP", "red"], z_step_um=2.0)
    return folder, data, volumes


def test_nd2_frames_and_shifts_as_the_array(nd2_file):
    folder, data, _ = nd2_file
    with open_stack(folder / "scan.nd2", channel=1) as src:
        assert (src.format, src.axes, src.n_frames, src.frame_shape) == ("ND2", "TCYX", 8,
                                                                          (40, 48))
        np.testing.assert_array_equal(src.read(2, 7), data[2:7, 1])
        np.testing.assert_array_equal(src.read(7, 8), data[7:8, 1])
        assert src.channel_names == ["GCaMP", "red"]
        assert src.pixel_size == pytest.approx((0.325, 0.325, "µm"))
    path = folder / "scan.nd2"
    got = align(path, channel=0, device="cpu", chunk_frames=3).shifts
    np.testing.assert_array_equal(got, align(data[:, 0], device="cpu", chunk_frames=3).shifts)
    assert describe(path)["channels"] == 2


def test_nd2_z_planes(nd2_file):
    folder, _, volumes = nd2_file
    with open_stack(source_path(folder / "stack.nd2", z=2), channel=0) as src:
        assert (src.axes, src.n_frames) == ("TZCYX", 6)
        np.testing.assert_array_equal(src.read(0, 6), volumes[:, 2, 0])
    with open_stack(folder / "stack.nd2", channel=1) as src:  # every plane a frame, in order
        assert src.n_frames == 18
        np.testing.assert_array_equal(src.read(4, 11), volumes[:, :, 1].reshape(18, 40, 48)[4:11])


def test_positions_by_name(tmp_path, nd2_file):
    _, data, _ = nd2_file
    fields = np.stack([data, data[:, ::-1], np.roll(data, 5, axis=-1)], axis=1)  # (T, P, C, ..)
    path = tmp_path / "fields.nd2"
    write_nd2(path, fields, ["a", "b"], positions=3)
    for k in range(3):
        with open_stack(source_path(path, dataset=f"P{k}"), channel=1) as src:
            assert (src.axes, src.n_frames) == ("TCYX", 8)
            np.testing.assert_array_equal(src.read(1, 6), fields[1:6, k, 1])
    res = xcorr("align", path, "--dataset", "P2", "--channel", "0", "--device", "cpu",
                "--out", tmp_path / "o", "-q")
    assert res.returncode == 0, res.stderr
    got = np.loadtxt(tmp_path / "o" / "shifts.csv", delimiter=",", skiprows=1, usecols=(2, 3))
    np.testing.assert_allclose(got, align(fields[:, 2, 0], device="cpu").shifts, atol=1e-4)


def test_an_acquisition_stopped_early_keeps_its_whole_time_points(tmp_path, nd2_file):
    _, data, volumes = nd2_file
    write_nd2(tmp_path / "cut.nd2", data, ["GCaMP", "red"], stored=5)
    with open_stack(tmp_path / "cut.nd2", channel=0) as src:
        assert src.n_frames == 5 and "stopped early" in src.notes[0]
        np.testing.assert_array_equal(src.read(0, 5), data[:5, 0])
    write_nd2(tmp_path / "cutz.nd2", volumes, ["GCaMP", "red"], z_step_um=1.0, stored=8)
    with open_stack(source_path(tmp_path / "cutz.nd2", z=1), channel=1) as src:
        assert src.n_frames == 2  # (the third time point has 2 of its 3 planes)
        np.testing.assert_array_equal(src.read(0, 2), volumes[:2, 1, 1])


def test_nd2_on_the_command_line(tmp_path, nd2_file):
    folder, data, _ = nd2_file
    res = xcorr("align", folder / "scan.nd2", "--channel", "0", "--device", "cpu", "--out",
                tmp_path / "o", "-q")
    assert res.returncode == 0, res.stderr
    mine = np.loadtxt(tmp_path / "o" / "shifts.csv", delimiter=",", skiprows=1, usecols=(2, 3))
    res = xcorr("info", folder / "scan.nd2")
    assert res.returncode == 0 and "ND2" in res.stdout and "GCaMP" in res.stdout, res.stdout
    ref = align(data[:, 0], device="cpu").shifts
    np.testing.assert_allclose(mine, ref, atol=1e-4)


def test_bad_nd2_is_one_line(tmp_path, nd2_file):
    whole = (nd2_file[0] / "scan.nd2").read_bytes()
    for name, content in (("cut.nd2", whole[:5000]), ("noise.nd2", bytes(range(256)) * 40)):
        (tmp_path / name).write_bytes(content)
        assert_clean_error(xcorr("align", tmp_path / name, "--device", "cpu", "--out",
                                 tmp_path / "o"), name)
        assert not (tmp_path / "o").exists()
    for k in (3, 4):  # RGB, and four components (which nd2 lists as channels)
        write_nd2(tmp_path / "rgb.nd2", np.zeros((2, k, 8, 9), np.uint16), ["c"], components=k)
        assert_clean_error(xcorr("align", tmp_path / "rgb.nd2", "--device", "cpu", "--out",
                                 tmp_path / "o"), f"{k} components per channel")
    write_nd2(tmp_path / "fields.nd2", np.zeros((2, 3, 1, 8, 9), np.uint16), ["c"], positions=3)
    for name, message in (("fields.nd2", "fields.nd2:/P0 or --dataset P0 (0 to 2)"),
                          ("fields.nd2:/P3", "P3 is not one of them (P0 to P2)"),
                          ("fields.nd2:/Q1", "its only datasets are its positions")):
        assert_clean_error(xcorr("align", tmp_path / name, "--device", "cpu", "--out",
                                 tmp_path / "o"), message)
    assert_clean_error(xcorr("align", f"{nd2_file[0] / 'scan.nd2'}:/data", "--channel", "0",
                             "--device", "cpu", "--out", tmp_path / "o"), "is ND2")
    code = ("import sys; sys.modules['nd2'] = None; sys.argv[0] = 'xcorr'\n"
            "from xcorr_app.cli import main; main()")
    res = subprocess.run([sys.executable, "-c", code, "info", str(nd2_file[0] / "scan.nd2")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert_clean_error(res, "pip install 'xcorr-app[nd2]'")


@pytest.mark.slow
def test_dask_tasks_open_nd2_by_path(nd2_file, client):
    xdask = pytest.importorskip("xcorr_app.dask")
    folder, data, _ = nd2_file
    got = xdask.align(str(folder / "scan.nd2"), channel=1, device="cpu", max_shift=8,
                      task_frames=3, client=client)
    assert got.settings["dask"]["task_frames"] == [3, 3, 2]
    np.testing.assert_array_equal(got.shifts, align(data[:, 1], device="cpu", max_shift=8).shifts)
