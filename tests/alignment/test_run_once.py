"""The run as one object: its options built and checked once on every entry point, and its
outputs written by the package (:meth:`AlignResult.save`) exactly as ``xcorr align`` writes
them."""

import json
import sys
import threading
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

import xcorr_app
from sample_paths import stack_path
from xcorr_app.alignment import AlignOptions
from xcorr_app.cli._main import cli

#: the functions whose calls are counted over one run: the options' construction (its checks)
#: and every normalization or check of ``max_shift``
COUNTED = ("__post_init__", "normalize_max_shift", "check_bound")


class Calls:
    """Calls of :data:`COUNTED` in xcorr's code during a block, on every thread."""

    def __init__(self):
        self.counts = Counter()

    def _profile(self, frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_name in COUNTED and "xcorr_app" in code.co_filename:
            if code.co_name != "__post_init__" or type(frame.f_locals.get("self")) is AlignOptions:
                self.counts[code.co_name] += 1

    def __enter__(self):
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)
        threading.setprofile(None)


RUNS = {"rigid": ["--max-shift", "8"], "patches": ["--max-shift", "8", "--patches", "2x2"]}


@pytest.mark.parametrize("kind", sorted(RUNS))
def test_the_cli_builds_the_options_once(kind, tmp_path):
    with Calls() as calls:
        res = CliRunner().invoke(cli, ["align", str(stack_path("cell")), "--device", "cpu",
                                       "--quiet", "--out", str(tmp_path / "o"), *RUNS[kind]])
    assert res.exit_code == 0, res.output
    assert calls.counts["__post_init__"] == 1
    assert calls.counts["normalize_max_shift"] == 1, calls.counts  # (the options' own)
    assert calls.counts["check_bound"] == 1, calls.counts  # (against the frames, once open)


@pytest.mark.parametrize("kind", sorted(RUNS))
def test_the_api_builds_the_options_once_and_takes_them_built(kind):
    keywords = {"max_shift": 8, "device": "cpu"}
    if kind == "patches":
        keywords["patches"] = (2, 2)
    with Calls() as calls:
        res = xcorr_app.align(str(stack_path("cell")), **keywords)
    assert calls.counts["__post_init__"] == 1
    assert calls.counts["normalize_max_shift"] == 1, calls.counts
    assert calls.counts["check_bound"] == 1, calls.counts
    opts = AlignOptions(**keywords)
    with Calls() as calls:
        again = xcorr_app.align(str(stack_path("cell")), options=opts)
    assert calls.counts["__post_init__"] == 0  # (built before: not checked again)
    np.testing.assert_array_equal(again.shifts, res.shifts)


@pytest.fixture
def in_process_cluster(monkeypatch):
    """``xcorr align --workers N`` on a Dask cluster of threads in this process (its worker
    threads are profiled too); the starts are listed."""
    distributed = pytest.importorskip("dask.distributed")
    import contextlib

    import xcorr_app.distributed

    started = []

    @contextlib.contextmanager
    def local_client(workers=None, scheduler=None):
        started.append(workers)
        with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                                dashboard_address=":0") as client:
            yield client

    monkeypatch.setattr(xcorr_app.distributed, "local_client", local_client)
    return started


def test_a_dask_run_checks_the_bound_once(tmp_path, in_process_cluster):
    """:func:`xcorr_app.dask.align` checks the bound in its pipeline; ``xcorr align
    --workers`` checks it before its cluster starts (one error line, no cluster for a bad
    one), and its pipeline does not check it again."""
    from xcorr_app.dask import align as dask_align

    path = str(stack_path("cell"))
    with Calls() as calls:
        api = dask_align(path, max_shift=8, device="cpu", scheduler="threads", task_frames=4)
    assert calls.counts == {"__post_init__": 1, "normalize_max_shift": 1, "check_bound": 1}
    with Calls() as calls:
        res = CliRunner().invoke(cli, ["align", path, "--device", "cpu", "--quiet",
                                       "--max-shift", "8", "--workers", "2",
                                       "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert in_process_cluster == [2]
    assert calls.counts == {"__post_init__": 1, "normalize_max_shift": 1, "check_bound": 1}
    assert (tmp_path / "o" / "shifts.csv").read_text() == api.csv_text()
    res = CliRunner().invoke(cli, ["align", path, "--device", "cpu", "--max-shift", "500",
                                   "--workers", "2", "--out", str(tmp_path / "bad")])
    assert res.exit_code == 2 and in_process_cluster == [2]  # (no second cluster started)
    lines = [ln for ln in res.output.splitlines() if not ln.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("error: --max-shift 500 reaches past"), lines


def test_the_volumes_options_are_built_once(tmp_path):
    """``xcorr align --volumes``: one VolumeOptions, max_shift parsed once, on the command line
    and in the API (which takes the options built)."""
    import tifffile

    from xcorr_app.alignment import VolumeOptions, align_volumes

    vol = np.random.default_rng(3).random((6, 20, 24)).astype(np.float32)
    stack = np.stack([vol, np.roll(vol, (1, 2, -1), axis=(0, 1, 2))])
    path = tmp_path / "v.tif"
    tifffile.imwrite(path, stack, imagej=True, metadata={"axes": "TZYX"})
    counts = Counter()

    def profile(frame, event, arg):
        code = frame.f_code
        if event == "call" and "xcorr_app" in code.co_filename:
            if code.co_name == "__post_init__" and type(frame.f_locals.get("self")) is VolumeOptions:
                counts["options"] += 1
            elif code.co_name == "parse_max_shift":
                counts["max_shift"] += 1

    sys.setprofile(profile)
    try:
        res = CliRunner().invoke(cli, ["align", str(path), "--volumes", "--device", "cpu",
                                       "--max-shift", "2,3,3", "--quiet", "--no-aligned",
                                       "--out", str(tmp_path / "o")])
    finally:
        sys.setprofile(None)
    assert res.exit_code == 0, res.output
    assert counts == {"options": 1, "max_shift": 1}, counts
    opts = VolumeOptions(max_shift=(2, 3, 3), upsample=1, device="cpu")
    counts.clear()
    sys.setprofile(profile)
    try:
        got = align_volumes(stack, options=opts)
    finally:
        sys.setprofile(None)
    assert counts == {}, counts
    np.testing.assert_array_equal(got.shifts[1], [-1, -2, 1])
    with pytest.raises(xcorr_app.InputError, match="either as options= or as keywords"):
        align_volumes(stack, options=opts, max_shift=2)


def test_options_or_keywords_not_both():
    with pytest.raises(xcorr_app.InputError, match="either as options= or as keywords"):
        xcorr_app.align(np.zeros((2, 8, 8), np.float32), options=AlignOptions(), max_shift=2)
    with pytest.raises(xcorr_app.InputError, match="must be an AlignOptions"):
        xcorr_app.align(np.zeros((2, 8, 8), np.float32), options={"max_shift": 2})


def test_decided_copies_without_a_second_check():
    opts = AlignOptions(max_shift=4)
    with Calls() as calls:
        run = opts._decided(prefilter="gaussian:1", boundary="linear")
    assert calls.counts["__post_init__"] == 0
    assert (run.prefilter, run.boundary, run.max_shift) == ("gaussian:1", "linear", (4, 4))
    assert opts.prefilter == "auto"  # (a copy)
    with pytest.raises(AttributeError):
        opts._decided(max_shfit=3)


#: shifts.json's values that depend on the moment the run was timed
TIMED = ("seconds_measuring", "frames_per_second")


def _files(folder):
    return {p.name: p for p in folder.iterdir() if not p.name.startswith(".")}


@pytest.mark.parametrize("kind", sorted(RUNS))
def test_save_writes_what_the_cli_writes(kind, tmp_path):
    """Byte for byte: every output but shifts.json's times; motion_field.npz by its arrays
    (a zip's entries carry the time they were written)."""
    path = str(stack_path("cell"))
    res = CliRunner().invoke(cli, ["align", path, "--device", "cpu", "--quiet", "--out",
                                   str(tmp_path / "cli"), *RUNS[kind]])
    assert res.exit_code == 0, res.output
    keywords = {"max_shift": 8, "device": "cpu"}
    if kind == "patches":
        keywords["patches"] = "2x2"
    written = xcorr_app.align(path, **keywords).save(tmp_path / "api")
    cli_files, api_files = _files(tmp_path / "cli"), _files(tmp_path / "api")
    assert sorted(cli_files) == sorted(api_files) == sorted(p.name for p in written.values())
    for name, p in cli_files.items():
        if name == "shifts.json":
            a, b = (json.loads(f.read_text()) for f in (p, api_files[name]))
            for key in TIMED:
                a.pop(key), b.pop(key)
            assert a == b
        elif name.endswith(".npz"):
            with np.load(p) as a, np.load(api_files[name]) as b:
                assert sorted(a.files) == sorted(b.files)
                for k in a.files:
                    np.testing.assert_array_equal(a[k], b[k])
        else:
            assert p.read_bytes() == api_files[name].read_bytes(), name


def test_save_keeps_existing_outputs_and_writes_nothing_on_a_bad_option(tmp_path):
    res = xcorr_app.align(str(stack_path("cell")), max_shift=8, device="cpu",
                          quality=False)
    folder = tmp_path / "run"
    res.save(folder, aligned=False)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    with pytest.raises(xcorr_app.errors.OutputError, match="exist"):
        res.save(folder, aligned=False)
    with pytest.raises(xcorr_app.InputError, match="crop"):
        res.save(tmp_path / "other", aligned=False, crop=True)
    assert not (tmp_path / "other").exists()
    # (a string is true in Python: force="no" replaced the outputs, plots="false" wrote them)
    for flag, value in (("force", "no"), ("plots", "false"), ("aligned", "no"), ("crop", 2),
                        ("keep_dtype", "no")):
        with pytest.raises(xcorr_app.InputError, match=f"{flag} must be True or False"):
            res.save(folder, **{flag: value})
    with pytest.raises(xcorr_app.InputError, match="unknown resampling 'nearest'"):
        res.save(folder, resample="nearest")
    for bad, said in ((None, "NoneType"), (123, "int"), ("", "''"), (b"run", "bytes")):
        with pytest.raises(xcorr_app.InputError, match=f"folder must be a path .*{said}"):
            res.save(bad)
    with pytest.raises(xcorr_app.InputError, match="force must be True or False"):
        xcorr_app.align_sessions([str(stack_path("cell"))], out=tmp_path / "s", force="no",
                                 max_shift=8, device="cpu")
    assert not (tmp_path / "s").exists()
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    written = res.save(folder, force=True, format="hdf5:/data")
    assert (folder / "aligned.h5").is_file() and not (folder / "quality.png").exists()
    assert written["aligned.h5"] == folder / "aligned.h5" and "aligned.tif" not in written


def test_save_without_aligned_removes_only_an_earlier_runs_aligned_tif(tmp_path):
    """``aligned=False`` (``--no-aligned``, napari's "Save outputs…") removes the aligned stack
    of an earlier run with ``force``; an ``aligned.tif`` with no run's ``shifts.json`` beside it
    is someone's file: refused, ``force`` or not, named, and kept."""
    import tifffile

    res = xcorr_app.align(str(stack_path("cell")), max_shift=8, device="cpu", quality=False)
    mine = tmp_path / "mine"
    mine.mkdir()
    tifffile.imwrite(mine / "aligned.tif", np.arange(24, dtype=np.uint8).reshape(2, 3, 4))
    before = (mine / "aligned.tif").read_bytes()
    for force in (False, True):
        with pytest.raises(xcorr_app.errors.OutputError,
                           match=r"mine/aligned\.tif is not the aligned stack of an earlier "
                                 r"xcorr run.*choose another folder"):
            res.save(mine, aligned=False, force=force)
        assert [p.name for p in mine.iterdir()] == ["aligned.tif"]
        assert (mine / "aligned.tif").read_bytes() == before
    cli_run = CliRunner().invoke(cli, ["align", str(stack_path("cell")), "--device", "cpu",
                                       "--no-aligned", "--force", "--out", str(mine)])
    assert cli_run.exit_code == 2 and cli_run.output.count("error: ") == 1, cli_run.output
    assert "aligned.tif is not the aligned stack of an earlier xcorr run" in cli_run.output
    assert [p.name for p in mine.iterdir()] == ["aligned.tif"]
    assert (mine / "aligned.tif").read_bytes() == before
    run = tmp_path / "run"
    res.save(run, plots=False)
    assert sorted(res.save(run, aligned=False, plots=False, force=True)) == [
        "shifts.csv", "shifts.json"]
    assert not (run / "aligned.tif").exists()


def test_save_writes_other_channels_only_of_a_channel_run(tmp_path):
    """``channels`` (``--apply-to``): a hyperstack of the input's listed channels aligned by the
    shifts of the channel measured; a run of a stack without channels, or a channel the input
    lacks, is an InputError (never channel 0 written under another's name)."""
    import tifffile

    rng = np.random.default_rng(5)
    frames = rng.random((4, 40, 48)).astype(np.float32)
    plain = xcorr_app.align(frames, max_shift=4, device="cpu", quality=False)
    with pytest.raises(xcorr_app.InputError, match="must measure one channel"):
        plain.save(tmp_path / "a", channels=[0])
    hyper = np.stack([frames, frames[:, ::-1]], axis=1)
    tifffile.imwrite(tmp_path / "h.tif", hyper, imagej=True, metadata={"axes": "TCYX"})
    res = xcorr_app.align(str(tmp_path / "h.tif"), channel=0, max_shift=4, device="cpu",
                          quality=False)
    with pytest.raises(xcorr_app.InputError, match="2 is not one of its channels 0 to 1"):
        res.save(tmp_path / "b", channels=[2])
    res.save(tmp_path / "c", channels=[1, 0])
    got = tifffile.imread(tmp_path / "c" / "aligned.tif")
    assert got.shape == (4, 2, 40, 48)
    for k, channel in enumerate((1, 0)):
        want = np.concatenate([c for _, c in xcorr_app.apply_shifts(hyper[:, channel],
                                                                    res.shifts)])
        np.testing.assert_array_equal(got[:, k], want)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.gpu
def test_save_of_a_cupy_run_writes_what_a_numpy_run_writes(tmp_path):
    """CuPy in: the result saves the same shifts and aligned stack (warped on the GPU from the
    CuPy input) as the same frames given as NumPy."""
    import cupy as cp
    import tifffile

    frames = tifffile.imread(stack_path("moon"))
    host = xcorr_app.align(frames, max_shift=8, device="gpu")
    dev = xcorr_app.align(cp.asarray(frames), max_shift=8)
    a, b = host.save(tmp_path / "np"), dev.save(tmp_path / "cp", keep_dtype=True)
    # (a first run may plan its correlation otherwise than the second: float32 rounding apart)
    np.testing.assert_allclose(dev.shifts, host.shifts, atol=1e-4)
    np.testing.assert_allclose(tifffile.imread(b["aligned.tif"]),
                               np.clip(np.rint(tifffile.imread(a["aligned.tif"])), 0, 65535),
                               atol=1)
    assert tifffile.imread(b["aligned.tif"]).dtype == frames.dtype
