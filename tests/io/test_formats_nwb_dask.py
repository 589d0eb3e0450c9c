"""NWB image series written by pynwb, a missing optional library (one line naming the pip
command), and Dask tasks opening Zarr and HDF5 sources by their path."""

import subprocess
import sys
from datetime import datetime, timezone

import numpy as np
import pytest

from xcorr_app import align
from xcorr_app.io import open_stack

from cli_helpers import ROOT, assert_clean_error, xcorr
from synthetic import drift_stack

h5py = pytest.importorskip("h5py")


@pytest.fixture(scope="module")
def stack():
    return drift_stack(np.random.default_rng(7), n=8, shape=(40, 48))[0]


def write_nwb(path, stack):
    """Two series: a TwoPhotonSeries of ``stack`` and an ImageSeries (NWB stores frames as
    (frame, x, y): the transpose of ``stack``'s (frame, y, x))."""
    pynwb = pytest.importorskip("pynwb")
    from pynwb.image import ImageSeries
    from pynwb.ophys import OpticalChannel, TwoPhotonSeries

    nwb = pynwb.NWBFile(session_description="drift", identifier="x",
                        session_start_time=datetime(2026, 1, 1, tzinfo=timezone.utc))
    device = nwb.create_device(name="scope")
    plane = nwb.create_imaging_plane(
        name="plane", optical_channel=OpticalChannel(name="green", description="g",
                                                     emission_lambda=520.0),
        description="V1", device=device, excitation_lambda=920.0, indicator="GCaMP",
        location="V1", imaging_rate=30.0)
    nwb.add_acquisition(TwoPhotonSeries(name="TwoPhotonSeries", imaging_plane=plane, rate=30.0,
                                        data=stack.transpose(0, 2, 1), unit="n.a."))
    nwb.add_acquisition(ImageSeries(name="behaviour", data=stack[:4].transpose(0, 2, 1),
                                    rate=30.0, unit="n.a."))
    with pynwb.NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)
    return path


def test_nwb_series_by_name_gives_the_arrays_shifts(tmp_path, stack):
    path = write_nwb(tmp_path / "session.nwb", stack)
    with open_stack(f"{path}:TwoPhotonSeries") as src:
        assert src.format == "NWB TwoPhotonSeries" and src.n_frames == 8
        np.testing.assert_array_equal(src.read(0, 8), stack)
    got = align(f"{path}:/acquisition/TwoPhotonSeries", device="cpu", chunk_frames=3)
    np.testing.assert_array_equal(got.shifts, align(stack, device="cpu", chunk_frames=3).shifts)
    res = xcorr("align", path, "--device", "cpu", "--out", tmp_path / "o")
    assert_clean_error(res, "several image series", "TwoPhotonSeries", "behaviour")
    assert not (tmp_path / "o").exists()


def test_a_missing_library_is_one_line_with_the_pip_command(tmp_path, stack):
    with h5py.File(tmp_path / "m.h5", "w") as f:
        f["data"] = stack
    code = ("import sys; sys.modules['h5py'] = None; sys.argv[0] = 'xcorr'\n"
            "from xcorr_app.cli import main; main()")
    res = subprocess.run([sys.executable, "-c", code, "align", str(tmp_path / "m.h5"),
                          "--device", "cpu", "--out", str(tmp_path / "o")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert_clean_error(res, "needs the h5py package", "pip install 'xcorr-app[hdf5]'")
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_dask_tasks_open_zarr_and_hdf5_by_path(tmp_path, stack, client):
    zarr = pytest.importorskip("zarr")
    xdask = pytest.importorskip("xcorr_app.dask")
    zarr.create_array(str(tmp_path / "m.zarr"), data=stack, chunks=(2, 40, 48))
    with h5py.File(tmp_path / "m.h5", "w") as f:
        f.create_dataset("scan/data", data=stack, chunks=(1, 40, 48))
    want = align(stack, device="cpu", max_shift=8).shifts
    for path in (str(tmp_path / "m.zarr"), f"{tmp_path / 'm.h5'}:/scan/data"):
        got = xdask.align(path, device="cpu", max_shift=8, task_frames=3, client=client)
        assert got.settings["dask"]["task_frames"] == [3, 3, 2]
        np.testing.assert_array_equal(got.shifts, want)


def test_a_series_of_external_files_names_them(tmp_path):
    """An ImageSeries whose frames are in external files (pynwb stores an empty (0, 0, 0)
    data beside their names): one line naming those files, not "a zero-size image"."""
    pynwb = pytest.importorskip("pynwb")
    from pynwb.image import ImageSeries

    nwb = pynwb.NWBFile(session_description="s", identifier="x",
                        session_start_time=datetime(2026, 1, 1, tzinfo=timezone.utc))
    nwb.add_acquisition(ImageSeries(name="ext", external_file=["movie.tif"], format="external",
                                    starting_frame=[0], rate=10.0, num_samples=12))
    path = tmp_path / "external.nwb"
    with pynwb.NWBHDF5IO(str(path), "w") as io:
        io.write(nwb)
    res = xcorr("info", path)
    assert_clean_error(res, "stores its frames outside the file", "movie.tif",
                       "align those files instead")
