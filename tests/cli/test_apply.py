"""``xcorr apply SHIFTS PATH``: an earlier run's shifts.csv / shifts.json / motion_field.npz
applied to a stack reproduces that run's aligned.tif byte for byte on the CPU, applies to
another format and channel, and refuses what does not fit in one line, writing nothing."""

import numpy as np
import pytest
import tifffile

from sample_paths import stack_path
from cli_helpers import assert_clean_error, xcorr


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A rigid and a --patches run of the cell sample on the CPU."""
    folder = tmp_path_factory.mktemp("runs")
    for name, extra in (("rigid", []), ("patches", ["--patches", "2x2"])):
        res = xcorr("align", stack_path("cell"), "--device", "cpu", "--out", folder / name,
                    "--quiet", *extra)
        assert res.returncode == 0, res.stderr
    return folder


@pytest.mark.parametrize("table", ["rigid/shifts.csv", "rigid/shifts.json",
                                   "patches/motion_field.npz"])
def test_apply_reproduces_the_runs_aligned_tif(tmp_path, run, table):
    res = xcorr("apply", run / table, stack_path("cell"), "--device", "cpu", "--out",
                tmp_path / "again.tif", "--chunk-frames", "5")
    assert res.returncode == 0, res.stderr
    assert "wrote" in res.stdout
    want = run / table.split("/")[0] / "aligned.tif"
    assert (tmp_path / "again.tif").read_bytes() == want.read_bytes()


def test_apply_to_another_format_and_channel(tmp_path, run):
    h5py = pytest.importorskip("h5py")
    stack = tifffile.imread(stack_path("cell"))
    with h5py.File(tmp_path / "two.h5", "w") as f:
        f["data"] = np.stack([stack, stack[..., ::-1]], axis=1)  # T, C, Y, X
        f["data"].attrs["axes"] = "TCYX"
    res = xcorr("apply", run / "rigid" / "shifts.csv", tmp_path / "two.h5", "--channel", "0",
                "--device", "cpu", "--out", tmp_path / "out.h5", "-q")
    assert res.returncode == 0, res.stderr
    with h5py.File(tmp_path / "out.h5") as f:
        np.testing.assert_array_equal(f["aligned"][...],
                                      tifffile.imread(run / "rigid" / "aligned.tif"))


@pytest.mark.parametrize("case, words", [
    ("frames", ["holds the shifts of 12 frames", "has 8"]),
    ("size", ["measured on frames of 120x160", "has 120x150"]),
    ("table", ["not a shift table", "dy"]),
    ("suffix", ["NAME.tif, NAME.ome.tif, NAME.ome.zarr, NAME.h5 or NAME.nwb"]),
    ("resample", ["--resample cubic", "rigid shifts"]),
    ("exists", ["exists", "--force"]),
])
def test_what_does_not_fit_is_one_line_and_nothing_is_written(tmp_path, run, case, words):
    stack = tifffile.imread(stack_path("cell"))
    table, target, out, extra = run / "rigid" / "shifts.csv", stack_path("cell"), \
        tmp_path / "o" / "out.tif", []
    if case == "frames":
        target = tifffile.imwrite(tmp_path / "short.tif", stack[:8]) or tmp_path / "short.tif"
    elif case == "size":
        target = tifffile.imwrite(tmp_path / "narrow.tif", stack[..., :150]) or \
            tmp_path / "narrow.tif"
    elif case == "table":
        table = tmp_path / "shifts.csv"
        table.write_text("frame,y,x\n0,1,2\n")
    elif case == "suffix":
        out = tmp_path / "o" / "out.png"
    elif case == "resample":
        extra = ["--resample", "cubic"]
    elif case == "exists":
        out.parent.mkdir()
        out.write_bytes(b"keep")
    res = xcorr("apply", table, target, "--device", "cpu", "--out", out, *extra)
    assert_clean_error(res, *words)
    if case == "exists":
        assert out.read_bytes() == b"keep"
    else:
        assert not out.parent.exists()


def test_a_table_edited_by_hand_applies_as_the_runs(tmp_path, run):
    """Comment lines and spaces after the commas (a table edited by hand or a spreadsheet)
    made it unreadable; a row of another length is said without Python's class names."""
    lines = (run / "rigid" / "shifts.csv").read_text().splitlines()
    edited = tmp_path / "shifts.csv"
    edited.write_text("# corrected by hand\n" + "\n".join(ln.replace(",", ", ")
                                                          for ln in lines) + "\n")
    res = xcorr("apply", edited, stack_path("cell"), "--device", "cpu", "--out",
                tmp_path / "again.tif", "-q")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "again.tif").read_bytes() == \
        (run / "rigid" / "aligned.tif").read_bytes()
    edited.write_text("frame,dy,dx\n0,0,0,7\n")
    res = xcorr("apply", edited, stack_path("cell"), "--device", "cpu", "--out",
                tmp_path / "bad.tif")
    assert_clean_error(res, "row 1 has more fields than its header")
    assert "ValueError" not in res.stderr
