"""The aligned stack's writers and a run's outputs (io/_stack_writers.py, io/_writer.py,
alignment/outputs/_save.py): a failed write (a full disk; here a file size limit, RLIMIT_FSIZE)
is one ``error:`` line in every format and nothing left (HDF5 ended in a segmentation fault);
``--keep-dtype`` writes the input's pixel type or refuses, before anything is written, a format
that cannot hold it; ``--force`` removes the outputs of an earlier run that the new one does not
write, in its commit, never someone's file; a NaN, zero or negative pixel size is carried into
no output."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tifffile

import xcorr_app
from cli_helpers import ROOT, assert_clean_error, xcorr
from synthetic import drift_stack, write_stack
from xcorr_app.errors import InputError, OutputError
from xcorr_app.io import aligned_name, as_dtype, describe, open_stack, stack_writer

zarr = pytest.importorskip("zarr")
h5py = pytest.importorskip("h5py")

#: ``--out-format`` -> the aligned stack's name in an outputs folder (``xcorr apply``: its suffix)
FORMATS = {"tiff": "aligned.tif", "ome-tiff": "aligned.ome.tif",
           "ome-zarr": "aligned.ome.zarr", "hdf5": "aligned.h5"}

#: ``python -c`` of a child whose files may grow to ``argv[1]`` bytes at most (a full disk as a
#: writer sees it: EFBIG, with SIGXFSZ ignored), then ``argv[2]`` (``cli``: the command line of
#: the rest; else a program, run with the rest as its arguments)
LIMITED = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
if sys.argv[2] == "cli":
    sys.argv[:] = ["xcorr", *sys.argv[3:]]
    runpy.run_module("xcorr_app.cli", run_name="__main__", alter_sys=True)
else:
    code, sys.argv[:] = sys.argv[2], ["-c", *sys.argv[3:]]
    exec(compile(code, "<string>", "exec"), {"__name__": "__main__"})
"""


def limited(limit, what, *args):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("XCORR_DEBUG", None)
    return subprocess.run([sys.executable, "-c", LIMITED, str(limit), what, *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=300)


def visible(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture(scope="module")
def run0(tmp_path_factory):
    """A uint16 stack (8 frames of 96x112: 344 KB as float32) and the shifts.csv of its run."""
    folder = tmp_path_factory.mktemp("in")
    stack, _ = drift_stack(np.random.default_rng(11), n=8, shape=(96, 112))
    src = write_stack(folder / "in.tif", stack)
    res = xcorr("align", src, "--out", folder / "run", "--device", "cpu", "--no-aligned", "-q")
    assert res.returncode == 0, res.stderr
    return src, folder / "run" / "shifts.csv"


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("cmd", ["align", "apply"])
def test_a_full_disk_is_one_error_line_in_every_format(tmp_path, run0, cmd, fmt):
    """The aligned stack cannot grow past 64 KB: one ``error: cannot write`` line naming it,
    exit status 2, no crash (HDF5: a segmentation fault, 139), nothing left (no temporary file,
    no lock, no folder made)."""
    src, shifts = run0
    out = tmp_path / "o"
    if cmd == "align":
        res = limited(64_000, "cli", "align", src, "--out", out, "--device", "cpu",
                      "--out-format", fmt, "-q")
        name = out / FORMATS[fmt]
    else:
        out.mkdir()
        name = out / FORMATS[fmt].replace("aligned", "x")
        res = limited(64_000, "cli", "apply", shifts, src, "--out", name, "--device", "cpu",
                      "-q")
    assert res.returncode == 2, res.stderr
    assert_clean_error(res, f"cannot write {name}", "check free disk space")
    assert "Segmentation" not in res.stderr and "Exception ignored" not in res.stderr
    assert not out.exists() if cmd == "align" else visible(out) == []


#: a writer's whole life in a child of limited file size: ``argv``: folder, name, ``write`` (the
#: limit from the start) or ``close`` (the limit once every frame is handed over: HDF5 holds
#: them in its cache until it closes)
WRITER = """
import resource, sys
from pathlib import Path
import numpy as np
from xcorr_app.errors import OutputError
from xcorr_app.io import stack_writer
folder, name, when = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
frames = np.random.default_rng(0).random((20, 48, 40)).astype(np.float32)
writer = stack_writer(folder / name, (48, 40), 20)
try:
    if when == "write":
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, resource.RLIM_INFINITY))
    writer.write(frames[:7])
    writer.write(frames[7:])
    if when == "close":
        size = max([p.stat().st_size for p in folder.rglob("*") if p.is_file()], default=0)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 1, resource.RLIM_INFINITY))
    writer.close()
    print("closed")
except OutputError as exc:
    writer.abort()
    print("error:", exc)
"""


@pytest.mark.parametrize("when", ["write", "close"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_writer_that_fails_is_closed_on_every_path(tmp_path, fmt, when):
    """A write that fails while frames are written or while the file is finished: an
    OutputError, the temporary output removed, the process ends normally (h5py crashed at its
    exit after HDF5 had failed to flush); or, where nothing more is written at the end, a whole
    file."""
    res = limited(10**9, WRITER, tmp_path, FORMATS[fmt], when)
    assert res.returncode == 0, res.stderr
    assert "Exception ignored" not in res.stderr, res.stderr
    if res.stdout.startswith("error:"):
        assert f"cannot write {tmp_path / FORMATS[fmt]}" in res.stdout
        assert visible(tmp_path) == []
    else:
        assert res.stdout == "closed\n" and when == "close" and fmt != "hdf5", res.stdout
        with open_stack(tmp_path / FORMATS[fmt]) as src:
            want = np.random.default_rng(0).random((20, 48, 40)).astype(np.float32)
            np.testing.assert_array_equal(src.read(0, 20), want)
    if when == "write" or fmt == "hdf5":
        assert res.stdout.startswith("error:"), res.stdout


# ---------------------------------------------------------------- --keep-dtype


DTYPES = ["uint8", "uint16", "int16", "float16", "float32", "float64"]
#: what a format cannot hold: ImageJ no float16 or float64, tifffile's OME writer no float16
REFUSED = {("tiff", "float16"), ("tiff", "float64"), ("ome-tiff", "float16")}
NAMES = {"tiff": "ImageJ TIFF", "ome-tiff": "OME-TIFF"}


@pytest.fixture(scope="module")
def results():
    """A result of every input type (frames of another size each) and its aligned float32
    frames."""
    out = {}
    for k, dtype in enumerate(DTYPES):
        stack, _ = drift_stack(np.random.default_rng(k), n=3, shape=(40 + 3 * k, 48 - 2 * k))
        frames = stack.astype(np.float64) - (300 if dtype == "int16" else 0)
        res = xcorr_app.align(frames.astype(dtype), device="cpu", quality=False, verify=False)
        out[dtype] = res, np.concatenate([c for _, c in res.apply(device="cpu")])
    return out


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("dtype", DTYPES)
def test_keep_dtype_is_honoured_or_refused_per_format(tmp_path, results, dtype, fmt):
    res, aligned = results[dtype]
    folder = tmp_path / "o"
    if (fmt, dtype) in REFUSED:
        with pytest.raises(InputError, match=f"the {NAMES[fmt]} output cannot hold {dtype} "
                                             r"pixels \(keep_dtype=True\); write it as "):
            res.save(folder, format=fmt, keep_dtype=True, plots=False)
        assert not folder.exists()
        return
    written = res.save(folder, format=fmt, keep_dtype=True, plots=False)
    with open_stack(written[aligned_name(fmt)]) as src:
        assert src.dtype == dtype
        got = src.read(0, src.n_frames)
    np.testing.assert_array_equal(got, as_dtype(aligned, dtype))
    if dtype == "int16":
        assert (got < 0).any()  # (a signed type: kept, not clipped at 0)


def test_keep_dtype_refused_on_the_command_line_before_reading(tmp_path):
    """``align`` and ``apply``: one error line naming the format and the type, exit 2, nothing
    written; apply of an int16 stack to an ImageJ TIFF keeps int16."""
    stack, _ = drift_stack(np.random.default_rng(5), n=4, shape=(40, 44))
    with h5py.File(tmp_path / "in.h5", "w") as f:
        f["f64"] = stack.astype(np.float64)
        f["f16"] = stack.astype(np.float16)
        f["i16"] = stack.astype(np.int16) - 200
    res = xcorr("align", f"{tmp_path / 'in.h5'}:/f64", "--out", tmp_path / "o", "--keep-dtype",
                "--device", "cpu")
    assert_clean_error(res, "ImageJ TIFF output cannot hold float64 pixels (--keep-dtype)",
                       "OME-TIFF, OME-Zarr or HDF5")
    assert res.returncode == 2 and not (tmp_path / "o").exists()
    run = xcorr("align", f"{tmp_path / 'in.h5'}:/i16", "--out", tmp_path / "r", "--device",
                "cpu", "-q", "--no-aligned")
    assert run.returncode == 0, run.stderr
    res = xcorr("apply", tmp_path / "r" / "shifts.csv", f"{tmp_path / 'in.h5'}:/f16", "--out",
                tmp_path / "x.ome.tif", "--keep-dtype", "--device", "cpu")
    assert_clean_error(res, "OME-TIFF output cannot hold float16 pixels", "OME-Zarr or HDF5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5", "r"]
    res = xcorr("apply", tmp_path / "r" / "shifts.csv", f"{tmp_path / 'in.h5'}:/i16", "--out",
                tmp_path / "x.tif", "--keep-dtype", "--device", "cpu", "-q")
    assert res.returncode == 0, res.stderr
    with tifffile.TiffFile(tmp_path / "x.tif") as tif:
        assert tif.is_imagej and tif.series[0].dtype == np.int16 and tif.series[0].axes == "TYX"


# ---------------------------------------------------------------- --force: stale outputs


@pytest.fixture(scope="module")
def three():
    """Results of one stack: rigid with a quality report, rigid without, with patches."""
    stack, _ = drift_stack(np.random.default_rng(8), n=4, shape=(64, 72))
    stack = stack.astype(np.float32)
    return (xcorr_app.align(stack, device="cpu", verify=False),
            xcorr_app.align(stack, device="cpu", verify=False, quality=False),
            xcorr_app.align(stack, device="cpu", verify=False, patches=(2, 2)))


def test_force_removes_what_an_earlier_run_wrote_and_this_one_does_not(tmp_path, three):
    rigid, plain, patched = three
    folder = tmp_path / "run"
    patched.save(folder)
    assert visible(folder) == ["aligned.tif", "drift.png", "motion_field.npz",
                               "motion_field.png", "quality.png", "shifts.csv", "shifts.json"]
    (folder / "notes.txt").write_text("mine")  # (no output's name: never touched)
    plain.save(folder, force=True, format="ome-zarr")
    assert visible(folder) == ["aligned.ome.zarr", "drift.png", "notes.txt", "shifts.csv",
                               "shifts.json"]
    rigid.save(folder, force=True, format="hdf5", plots=False)
    assert visible(folder) == ["aligned.h5", "notes.txt", "shifts.csv", "shifts.json"]
    rigid.save(folder, force=True, format="ome-tiff")
    assert visible(folder) == ["aligned.ome.tif", "drift.png", "notes.txt", "quality.png",
                               "shifts.csv", "shifts.json"]
    rigid.save(folder, force=True, aligned=False, plots=False)
    assert visible(folder) == ["notes.txt", "shifts.csv", "shifts.json"]
    assert (folder / "notes.txt").read_text() == "mine"


def test_stale_outputs_go_only_when_the_new_run_commits(tmp_path, three, monkeypatch):
    """A run that fails after its aligned stack was written removes nothing of the earlier
    run (the removal is part of its commit) and leaves no temporary file."""
    from PIL import Image

    rigid, plain, patched = three
    folder = tmp_path / "run"
    patched.save(folder, format="ome-zarr")
    before = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}

    def full(self, fp, *args, **kwargs):  # (drift.png: after the aligned stack)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Image.Image, "save", full)
    with pytest.raises(OutputError, match="No space left on device"):
        plain.save(folder, force=True, format="hdf5")
    after = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert after == before


@pytest.mark.parametrize("name", ["quality.png", "aligned.h5", "motion_field.npz",
                                  "aligned.ome.zarr"])
def test_a_users_file_of_an_output_name_is_never_removed(tmp_path, three, name):
    """Without a run's shifts.json beside it, a file the run would remove as stale is
    someone's: refused, ``force`` or not, kept, nothing written."""
    rigid, plain, _ = three
    folder = tmp_path / "mine"
    folder.mkdir()
    mine = folder / name
    if name.endswith(".zarr"):
        mine.mkdir()
        (mine / ".zgroup").write_text("{}")
    else:
        mine.write_bytes(b"not a run's")
    what = "the aligned stack" if name.startswith("aligned") else "an output"
    for force in (False, True):
        with pytest.raises(OutputError, match=f"{name} is not {what} of an earlier xcorr run"):
            plain.save(folder, force=force, plots=False)
        assert visible(folder) == [name]
    assert (mine / ".zgroup").exists() if mine.is_dir() else mine.read_bytes() == b"not a run's"


def test_force_on_the_command_line_says_what_it_removed(tmp_path, run0):
    src, _ = run0
    out = tmp_path / "o"
    assert xcorr("align", src, "--out", out, "--device", "cpu", "-q").returncode == 0
    res = xcorr("align", src, "--out", out, "--device", "cpu", "--force", "--no-quality",
                "--out-format", "ome-zarr")
    assert res.returncode == 0, res.stderr
    assert f"removed {out / 'quality.png'} of an earlier run" in res.stdout
    assert f"removed {out / 'aligned.tif'} of an earlier run" in res.stdout
    assert visible(out) == ["aligned.ome.zarr", "drift.png", "shifts.csv", "shifts.json"]


# ---------------------------------------------------------------- unusable pixel sizes


@pytest.mark.parametrize("size", [float("nan"), 0.0, -0.5, float("inf")])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_an_unusable_pixel_size_is_carried_into_no_output(tmp_path, fmt, size):
    frames = np.random.default_rng(3).random((5, 12, 10)).astype(np.float32)
    for name, given in (("bad", (size, 0.25, "µm")), ("good", (0.5, 0.25, "µm"))):
        path = tmp_path / name / FORMATS[fmt]
        path.parent.mkdir()
        with stack_writer(path, (12, 10), 5, metadata={"pixel_size": given}) as w:
            w.write(frames)
        said = describe(path)["pixel_size"]
        if name == "good":
            assert said[:2] == (0.5, 0.25)
            continue
        assert said is None, said
        if fmt == "ome-zarr":  # (standard JSON: a bare NaN is none)
            attrs = json.loads((path / ".zattrs").read_text(),
                               parse_constant=lambda c: pytest.fail(f"{c} in .zattrs"))
            axes = attrs["multiscales"][0]["axes"]
            assert not [a for a in axes if "unit" in a]
        if fmt == "hdf5":
            with h5py.File(path) as f:
                assert "element_size_um" not in f["aligned"].attrs


def test_an_unusable_pixel_size_of_the_input_is_one_note(tmp_path, run0):
    """An OME-Zarr input whose scale is NaN: one ``note:`` line, the outputs uncalibrated
    (``align`` and ``apply``), .zattrs standard JSON."""
    stack, _ = drift_stack(np.random.default_rng(9), n=4, shape=(40, 44))
    root = zarr.open_group(str(tmp_path / "in.ome.zarr"), mode="w", zarr_format=2)
    root.create_array("0", data=stack, chunks=(2, 40, 44))
    root.attrs["multiscales"] = [{"version": "0.4", "axes": [
        {"name": "t", "type": "time"}, {"name": "y", "type": "space", "unit": "micrometer"},
        {"name": "x", "type": "space", "unit": "micrometer"}],
        "datasets": [{"path": "0", "coordinateTransformations": [
            {"type": "scale", "scale": [1.0, -0.4, -0.4]}]}]}]
    res = xcorr("align", tmp_path / "in.ome.zarr", "--out", tmp_path / "o", "--device", "cpu",
                "--out-format", "ome-zarr", "--no-quality")
    assert res.returncode == 0, res.stderr
    notes = [ln for ln in res.stderr.splitlines() if "no calibration" in ln]
    assert notes == ["note: in.ome.zarr says a pixel size of -0.4 x -0.4, which is no "
                     "calibration: the aligned stack carries none"], res.stderr
    attrs = json.loads((tmp_path / "o" / "aligned.ome.zarr" / ".zattrs").read_text())
    assert attrs["multiscales"][0]["datasets"][0]["coordinateTransformations"][0]["scale"] \
        == [1.0, 1.0, 1.0]
    res = xcorr("apply", tmp_path / "o" / "shifts.csv", tmp_path / "in.ome.zarr", "--out",
                tmp_path / "x.h5", "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("no calibration") == 1
    with h5py.File(tmp_path / "x.h5") as f:
        assert "element_size_um" not in f["aligned"].attrs
