"""xcorr_app.distributed._dask on a local cluster of 2 worker processes: the same shifts and filtered frames
as one process, also when a worker dies in the middle of a run."""

import importlib
import os

import numpy as np
import pytest
import tifffile

from synthetic import write_damaged_tiff
from sample_paths import SAMPLES, stack_path
from xcorr_app import align
from xcorr_app.errors import InputError, XcorrError

distributed = pytest.importorskip("dask.distributed")  # (not tests/distributed)
da = pytest.importorskip("dask.array")
xdask = pytest.importorskip("xcorr_app.distributed._dask")

pytestmark = pytest.mark.slow


def assert_same(got, want):
    """Bit for bit: every per-frame number of the two runs."""
    np.testing.assert_array_equal(got.shifts, want.shifts)
    np.testing.assert_array_equal(got.peak, want.peak)
    np.testing.assert_array_equal(got.confidence, want.confidence)
    np.testing.assert_array_equal(got.fft_shifts, want.fft_shifts)
    np.testing.assert_array_equal(got.agree, want.agree)
    np.testing.assert_array_equal(got.low_confidence, want.low_confidence)
    assert got.sources == want.sources
    assert got.plan == want.plan


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("reference", ["first", "mean", "previous", "5"])
def test_path_on_two_workers_equals_one_process(client, name, reference):
    """Each task opens the TIFF and reads only its own frames (5 per task: 3 tasks of 12)."""
    path = stack_path(name)
    want = align(path, reference=reference, max_shift=12, device="cpu", min_confidence=1.5)
    got = xdask.align(path, reference=reference, max_shift=12, device="cpu", min_confidence=1.5,
                      task_frames=5, client=client)
    assert got.settings["dask"]["task_frames"] == [5, 5, 2]
    assert_same(got, want)


@pytest.mark.parametrize("reference", ["first", "mean:7", "previous", "-1"])
def test_dask_array_on_two_workers_equals_one_process(client, reference):
    stack = tifffile.imread(stack_path("cell"))
    want = align(stack, reference=reference, device="cpu", normalization="none")
    arr = da.from_array(stack, chunks=(4, 50, -1))  # split frames too: rechunked to whole ones
    got = xdask.align(arr, reference=reference, device="cpu", normalization="none",
                      client=client)
    assert got.settings["dask"]["tasks"] == 3
    assert_same(got, want)


def test_phase_and_upsample_on_the_threaded_scheduler():
    path = stack_path("moon")
    kw = dict(normalization="phase", subpixel="upsample", upsample=10, device="cpu")
    assert_same(xdask.align(path, task_frames=4, scheduler="threads", **kw), align(path, **kw))


@pytest.mark.parametrize("kernel", ["gaussian:1.5", "dog:1,3", "sobel:1"])
def test_filter_on_two_workers_equals_one_process(client, kernel):
    from xcorr_app.filters import parse_kernel_spec

    stack = tifffile.imread(stack_path("hubble"))
    want = parse_kernel_spec(kernel)(stack, "mirror", 0.0).astype(np.float32)
    lazy = xdask.filter(stack_path("hubble"), kernel, mode="mirror", device="cpu", task_frames=5)
    got = np.concatenate([b for _, b in xdask.iter_blocks(lazy, client, window=2)])
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.float32


def test_apply_shifts_on_two_workers_equals_one_process(client):
    from xcorr_app.alignment import apply_shifts

    path = stack_path("cell")
    shifts = align(path, max_shift=10, device="cpu").shifts
    want = np.concatenate([c for _, c in apply_shifts(path, shifts, crop=True, device="cpu")])
    lazy = xdask.apply_shifts(path, shifts, crop=True, device="cpu", task_frames=5)
    got = np.concatenate([b for _, b in xdask.iter_blocks(lazy, client)])
    np.testing.assert_array_equal(got, want)


def _frames_or_die(path, start, stop, marker, victim):
    """Frames ``start:stop``; the first time block ``victim`` is read, its worker process dies
    (as a worker killed by the OOM killer or a lost node)."""
    if start == victim and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return tifffile.imread(path)[start:stop]


def _dying_array(path, marker, victim, step=4):
    from dask import delayed

    full = tifffile.imread(path)
    blocks = [da.from_delayed(delayed(_frames_or_die, pure=False)(str(path), a, min(a + step,
                                                                                   len(full)),
                                                                  str(marker), victim),
                              shape=full[a:a + step].shape, dtype=full.dtype)
              for a in range(0, len(full), step)]
    return da.concatenate(blocks), full


def test_a_worker_killed_mid_run_is_retried(client, tmp_path):
    """Dask reruns the dead worker's task elsewhere; the result is complete and exact."""
    path = stack_path("moon")
    marker = tmp_path / "killed"
    arr, full = _dying_array(path, marker, victim=4)
    got = xdask.align(arr, reference="previous", max_shift=12, device="cpu", client=client)
    assert marker.exists(), "no worker was killed: the test did not test anything"
    assert_same(got, align(full, reference="previous", max_shift=12, device="cpu"))

    marker2 = tmp_path / "killed-filter"
    arr, full = _dying_array(path, marker2, victim=8)
    got = np.concatenate([b for _, b in xdask.iter_blocks(
        xdask.filter(arr, "gaussian:2", device="cpu"), client)])
    assert marker2.exists()
    from xcorr_app.filters import gaussian

    np.testing.assert_array_equal(got, gaussian(full, 2).astype(np.float32))


def test_bad_inputs_say_what_to_do():
    with pytest.raises(XcorrError, match="out of range"):
        xdask.align(da.zeros((3, 8, 8)), reference=7, device="cpu", scheduler="sync")
    with pytest.raises(XcorrError, match="mode"):
        xdask.filter(da.zeros((3, 8, 8)), "gaussian:1", mode="bogus")
    with pytest.raises(XcorrError, match="cannot parse kernel"):
        xdask.filter(da.zeros((3, 8, 8)), "gaussian:x")
    with pytest.raises(XcorrError, match="do not match"):
        xdask.apply_shifts(da.zeros((3, 8, 8)), np.zeros((2, 2)))
    with pytest.raises(InputError, match="iter_blocks takes a dask array .* numpy.ndarray"):
        next(xdask.iter_blocks(np.zeros((3, 4, 4))))
    with pytest.raises(XcorrError, match="workers must be >= 1"):
        with xdask.local_client(workers=0):
            pass
    with pytest.raises(XcorrError, match="cannot reach the Dask scheduler"):
        with xdask.local_client(scheduler="tcp://127.0.0.1:9"):
            pass
    # (Dask refused these in its own words, from deep inside; 0 was taken for the default)
    for bad in (-3, 2.5, 0, True, "4"):
        for call in (lambda: xdask.align(da.zeros((3, 8, 8)), task_frames=bad, device="cpu",
                                         scheduler="sync"),
                     lambda: xdask.filter(da.zeros((3, 8, 8)), "gaussian:1", task_frames=bad),
                     lambda: xdask.apply_shifts(da.zeros((3, 8, 8)), np.zeros((3, 2)),
                                                task_frames=bad),
                     lambda: xdask.filter_channels(da.zeros((3, 2, 8, 8)), mix=[1, 1],
                                                   task_frames=bad)):
            with pytest.raises(InputError, match="task_frames must be a whole number"):
                call()


def test_float64_beyond_float32_in_a_later_frame_is_refused_in_the_task(tmp_path):
    """The filtered stack is float32: a float64 frame past frame 0 at 1e300 became Inf in a
    worker (a raw overflow warning, exit 0); each task checks the frames it reads and names
    the frame, for a file or an array, one channel or a bank over several."""
    stack = np.random.default_rng(4).random((6, 2, 12, 10))
    stack[3, 1, 4, 4] = 1e300
    one, two = tmp_path / "one.tif", tmp_path / "two.tif"
    tifffile.imwrite(one, stack[:, 1], photometric="minisblack")
    tifffile.imwrite(two, stack, photometric="minisblack", metadata={"axes": "TCYX"})
    for lazy, name in ((xdask.filter(one, "gaussian:1", device="cpu", task_frames=2), "one.tif"),
                       (xdask.filter(stack[:, 1], "box:3", device="cpu"), "the stack"),
                       (xdask.filter_channels(two, bank="dog:1,2", device="cpu"), "two.tif"),
                       (xdask.filter_channels(da.from_array(stack, chunks=(2, 2, 12, 10)),
                                              bank="dog:1,2", device="cpu"), "the stack")):
        with pytest.raises(InputError, match=rf"^{name}'s pixels reach at most 1e\+300 "
                                             r"\(frame 3\), outside float32's range"):
            lazy.compute(scheduler="sync")


def test_nan_frame_is_flagged_as_in_one_process(client, tmp_path):
    """A frame with a NaN pixel gets a NaN shift, flagged, on the cluster as in one process."""
    from xcorr_app import align

    stack = tifffile.imread(stack_path("cell")).astype(np.float32)
    stack[9, 3, 3] = np.nan
    path = tmp_path / "nan.tif"
    tifffile.imwrite(path, stack)
    got = xdask.align(path, device="cpu", task_frames=4, client=client)
    assert np.isnan(got.shifts[9]).all() and got.low_confidence[9] and not got.agree[9]
    assert np.isfinite(np.delete(got.shifts, 9, axis=0)).all()
    assert_same(got, align(path, device="cpu"))


def test_cli_workers_write_what_one_process_writes(tmp_path):
    """`xcorr align --workers 2` and `xcorr filter --workers 2`: the same shifts.csv, aligned
    stack and filtered stack as without them."""
    from cli_helpers import xcorr

    path = stack_path("hubble")
    one, two = tmp_path / "one", tmp_path / "two"
    for out, extra in ((one, ()), (two, ("--workers", "2"))):
        res = xcorr("align", path, "--max-shift", "12", "--reference", "previous", "--device",
                    "cpu", "--crop", "--out", out, *extra)
        assert res.returncode == 0, res.stderr
    assert "Dask cluster of 2 workers" in res.stdout
    assert (one / "shifts.csv").read_text() == (two / "shifts.csv").read_text()
    np.testing.assert_array_equal(tifffile.imread(one / "aligned.tif"),
                                  tifffile.imread(two / "aligned.tif"))
    for out, extra in ((one / "f.tif", ()), (two / "f.tif", ("--workers", "2"))):
        res = xcorr("filter", path, "--kernel", "dog:1,3", "--device", "cpu", "--out", out,
                    *extra)
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr
    np.testing.assert_array_equal(tifffile.imread(one / "f.tif"), tifffile.imread(two / "f.tif"))


def test_cli_scale_out_errors(tmp_path):
    from cli_helpers import assert_clean_error, xcorr

    path = stack_path("cell")
    assert_clean_error(xcorr("align", path, "--gpus", "0", "--workers", "2",
                             "--out", tmp_path / "a"), "--gpus ... runs without Dask",
                       "either --gpus LIST or a Dask cluster")
    assert_clean_error(xcorr("filter", path, "--kernel", "box:3", "--workers", "2",
                             "--scheduler", "tcp://127.0.0.1:9", "--out", tmp_path / "f.tif"),
                       "not both")
    assert_clean_error(xcorr("align", path, "--scheduler", "tcp://127.0.0.1:9",
                             "--out", tmp_path / "b"), "cannot reach the Dask scheduler")
    assert not (tmp_path / "a").exists() and not (tmp_path / "f.tif").exists()


def test_without_dask_the_commands_say_what_to_install(monkeypatch):
    import sys

    for name in ("distributed", "dask", "dask.array"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    with pytest.raises(XcorrError, match=r"pip install 'xcorr-app\[dask\]'"):
        with xdask.local_client(workers=2):
            pass
    with pytest.raises(XcorrError, match=r"Dask is not installed; pip install"):
        xdask.align(stack_path("cell"), device="cpu")


def test_first_failed_task_stops_the_run(client, tmp_path):
    """With a progress callback (the CLI's), the first failing task cancels the rest: here a
    compressed page whose data are damaged (the file's structure is whole, so the run starts)."""
    stack = np.tile(tifffile.imread(stack_path("cell")).astype(np.float32), (4, 1, 1))
    path = tmp_path / "damaged48.tif"
    write_damaged_tiff(path, stack, page=29)
    done = []
    with pytest.raises(XcorrError, match="cannot read"):
        xdask.align(path, device="cpu", task_frames=4, client=client, progress=done.append)
    assert sum(done) < len(stack)


def test_large_tasks_work_a_chunk_at_a_time(tmp_path, monkeypatch):
    """Tasks of 40 frames filter and shift 16 frames at a time; the output is the same."""
    from xcorr_app.alignment import apply_shifts
    from xcorr_app.filters import parse_kernel_spec

    stack = np.tile(tifffile.imread(stack_path("moon")), (4, 1, 1))
    path = tmp_path / "moon48.tif"
    tifffile.imwrite(path, stack)
    calls = []
    tasks = importlib.import_module("xcorr_app.distributed._dask_tasks")
    real = tasks._in_chunks
    monkeypatch.setattr(tasks, "_in_chunks", lambda a, b, c, fn: calls.append((a, b, c))
                        or real(a, b, c, fn))
    got = xdask.filter(path, "dog:1,3", device="cpu", task_frames=40).compute(scheduler="sync")
    want = parse_kernel_spec("dog:1,3")(stack, "reflect", 0.0).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    shifts = np.linspace(-2.5, 2.5, 96).reshape(48, 2)
    got = xdask.apply_shifts(path, shifts, device="cpu", task_frames=40).compute(
        scheduler="sync")
    want = np.concatenate([c for _, c in apply_shifts(path, shifts, device="cpu")])
    np.testing.assert_array_equal(got, want)
    assert (0, 40, tasks.CHUNK_FRAMES) in calls


@pytest.mark.parametrize("as_path", [True, False])
def test_prefilter_auto_is_decided_on_the_client_as_align_decides(tmp_path, as_path):
    """prefilter "auto" (the default): the band-pass for bleaching over a background, chosen
    from a few frames on the client, so that every task prefilters as a one-process run does."""
    import dask.array as da

    from xcorr_app.bench._accuracy_data import make_stack

    frames = make_stack("bleaching_background", 0, quick=True).frames
    if as_path:
        tifffile.imwrite(tmp_path / "b.tif", frames)
    stack = tmp_path / "b.tif" if as_path else da.from_array(frames)
    kw = dict(device="cpu", max_shift=8)
    got = xdask.align(stack, task_frames=5, scheduler="sync", **kw)
    one = align(frames, **kw)
    from xcorr_app.alignment.rigid._preprocess import AUTO_BANDPASS

    assert one.settings["prefilter"] == got.settings["prefilter"] == AUTO_BANDPASS
    assert got.settings["prefilter_auto"] and any(AUTO_BANDPASS in n for n in got.notes)
    np.testing.assert_allclose(got.shifts, one.shifts, atol=1e-6)


def test_a_run_from_a_path_imports_no_dask_array():
    """A run from a path makes no dask array, so it does not import ``dask.array`` (about half
    a second of a one-shot ``--scheduler`` run's client); one from an array does."""
    from fresh_process import fresh_output

    code = ("import sys, numpy as np, xcorr_app.dask as xd; "
            "xd.align(sys.argv[1], device='cpu', scheduler='sync'); "
            "path_run = 'dask.array' in sys.modules; "
            "xd.align(np.zeros((3, 32, 32), np.float32) + np.arange(32.0), device='cpu', "
            "scheduler='sync'); "
            "print(path_run, 'dask.array' in sys.modules)")
    assert fresh_output(code, stack_path("cell")).split() == ["False", "True"]
