"""Tests of xcorr_app.io._writer, _lock and _outputs: safe output writing, one writer per
output, a run's outputs together or not at all."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tifffile

from xcorr_app.errors import OutputError
from xcorr_app.io import (Interrupted, OutputLock, OutputRun, StagedOutputs, TiffStackWriter,
                          atomic_path, check_apart, open_stack, prepare_outputs,
                          remove_stale_temps, write_text, write_tiff)


def test_prepare_outputs_creates_missing_folders(tmp_path):
    target = tmp_path / "a" / "b" / "shifts.csv"
    prepare_outputs([target, tmp_path / "a" / "reg.tif"], force=False)
    assert target.parent.is_dir()
    assert os.listdir(target.parent) == []  # the writability probe is removed


def test_prepare_outputs_existing_file_needs_force(tmp_path):
    target = tmp_path / "shifts.csv"
    target.write_text("old")
    with pytest.raises(OutputError, match=r"shifts\.csv exists; pass force=True to overwrite"):
        prepare_outputs([target], force=False)
    prepare_outputs([target], force=True)
    assert target.read_text() == "old"  # checking never touches the file


def test_prepare_outputs_refuses_a_folder_as_output(tmp_path):
    with pytest.raises(OutputError, match="is a folder"):
        prepare_outputs([tmp_path], force=True)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0,
                    reason="root can write to read-only folders")
def test_prepare_outputs_unwritable_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(OutputError, match="is not writable"):
            prepare_outputs([folder / "out.csv"], force=False)
    finally:
        folder.chmod(0o700)


def test_prepare_outputs_failed_write_probe(tmp_path, monkeypatch):
    """The same branch for any user: creating the probe file fails."""
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.mkstemp", refuse)
    with pytest.raises(OutputError, match=r"is not writable \(Permission denied\)"):
        prepare_outputs([tmp_path / "out.csv"], force=False)


def test_prepare_outputs_parent_is_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for target in (blocker / "out.csv", blocker / "sub" / "out.csv"):
        with pytest.raises(OutputError, match="cannot create folder"):
            prepare_outputs([target], force=True)


def test_atomic_path_success(tmp_path):
    target = tmp_path / "table.csv"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".table.csv.tmp-")
        assert tmp.suffix == ".csv" and not tmp.exists()
        tmp.write_text("a,b\n")
    assert os.listdir(tmp_path) == ["table.csv"]
    assert target.read_text() == "a,b\n"


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_atomic_path_cleans_up_after_an_exception(tmp_path, error):
    target = tmp_path / "out.tif"
    with pytest.raises(error):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"partial")
            raise error()
    assert os.listdir(tmp_path) == []
    target.write_text("previous")
    with pytest.raises(error):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"partial")
            raise error()
    assert os.listdir(tmp_path) == ["out.tif"] and target.read_text() == "previous"


def test_write_text(tmp_path):
    write_text(tmp_path / "t.txt", "héllo\n")
    assert (tmp_path / "t.txt").read_text(encoding="utf-8") == "héllo\n"
    write_text(tmp_path / "t.txt", "again")
    assert os.listdir(tmp_path) == ["t.txt"]


def test_write_tiff_imagej_round_trip(tmp_path):
    stack = np.random.default_rng(0).random((5, 8, 9))  # float64: stored as float32
    path = tmp_path / "reg.tif"
    write_tiff(path, stack, metadata={"spacing": 0.5, "unit": "um"})
    with tifffile.TiffFile(path) as tif:
        assert tif.is_imagej
        assert tif.series[0].axes == "TYX" and tif.series[0].shape == (5, 8, 9)
        assert tif.imagej_metadata["frames"] == 5 and tif.imagej_metadata["unit"] == "um"
        np.testing.assert_array_equal(tif.asarray(), stack.astype(np.float32))
    assert os.listdir(tmp_path) == ["reg.tif"]


def test_write_tiff_single_image_and_plain_tiff(tmp_path):
    image = np.arange(12, dtype=np.uint16).reshape(3, 4)
    write_tiff(tmp_path / "one.tif", image)
    with tifffile.TiffFile(tmp_path / "one.tif") as tif:
        assert tif.is_imagej
        np.testing.assert_array_equal(tif.asarray(), image)
    stack = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    write_tiff(tmp_path / "plain.tif", stack, imagej=False)
    with tifffile.TiffFile(tmp_path / "plain.tif") as tif:
        assert not tif.is_imagej
        np.testing.assert_array_equal(tif.asarray(), stack)  # dtype kept


def test_tiff_stack_writer_streams_chunks(tmp_path):
    stack = np.random.default_rng(1).random((10, 8, 9)).astype(np.float32)
    path = tmp_path / "streamed.tif"
    with TiffStackWriter(path, (8, 9), np.float32, n_frames=10) as writer:
        for start, stop in ((0, 3), (3, 7), (7, 9)):
            writer.write(stack[start:stop])
        writer.write(stack[9])  # one 2-D frame
        assert not path.exists()  # appears only when complete
    assert os.listdir(tmp_path) == ["streamed.tif"]
    with tifffile.TiffFile(path) as tif:
        assert tif.is_imagej and tif.series[0].axes == "TYX"
        np.testing.assert_array_equal(tif.asarray(), stack)
    with open_stack(path) as src:  # readable by xcorr itself, memory-mapped
        assert src.memory_mapped
        np.testing.assert_array_equal(src.read(0, 10), stack)


def test_tiff_stack_writer_aborts_on_exception(tmp_path):
    path = tmp_path / "streamed.tif"
    with pytest.raises(KeyboardInterrupt):
        with TiffStackWriter(path, (4, 4), np.uint16) as writer:
            writer.write(np.zeros((2, 4, 4), np.uint16))
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []


def test_tiff_stack_writer_checks_frames(tmp_path):
    path = tmp_path / "s.tif"
    writer = TiffStackWriter(path, (4, 4), np.uint16, n_frames=3)
    with pytest.raises(ValueError, match="does not hold frames of shape"):
        writer.write(np.zeros((2, 4, 5), np.uint16))
    writer.write(np.zeros((2, 4, 4), np.uint16))
    with pytest.raises(ValueError, match="2 frames written .*expected 3"):
        writer.close()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("dtype, channels", [(np.uint16, 1), (np.float64, 1), (np.uint8, 3),
                                             (np.float32, 2)])
def test_tiff_stack_writer_reads_back_as_an_imagej_hyperstack(tmp_path, dtype, channels):
    """Frames, axes, pixel type and the ImageJ metadata as tifffile reads them back: a (T, Y, X)
    stack, or with ``channels`` a (T, C, Y, X) hyperstack; ImageJ types kept, others float32."""
    rng = np.random.default_rng(2)
    n_t = 4
    stack = (rng.random((n_t * channels, 6, 7)) * 200).astype(dtype)
    path = tmp_path / "h.tif"
    with TiffStackWriter(path, (6, 7), dtype, n_frames=len(stack), channels=channels) as w:
        w.write(stack[:3])
        w.write(stack[3:])
    stored = np.float32 if np.dtype(dtype) == np.float64 else dtype
    with tifffile.TiffFile(path) as tif:
        series = tif.series[0]
        assert tif.is_imagej and series.dtype == stored
        assert series.axes == ("TYX" if channels == 1 else "TCYX")
        want = {"ImageJ": "1.11a", "images": n_t * channels, "frames": n_t, "hyperstack": True,
                "mode": "grayscale", **({"channels": channels} if channels > 1 else {})}
        assert tif.imagej_metadata == want
        got = tif.asarray()
    np.testing.assert_array_equal(got.reshape(stack.shape), stack.astype(stored))
    assert got.shape == ((n_t, 6, 7) if channels == 1 else (n_t, channels, 6, 7))



# ------------------------------------------------------- a run's outputs: together or not at all

def test_staged_outputs_appear_together_on_commit(tmp_path):
    paths = [tmp_path / "a.csv", tmp_path / "b.tif"]
    with StagedOutputs(paths) as staged:
        write_text(paths[0], "a")
        write_tiff(paths[1], np.zeros((2, 4, 4), np.uint16))
        write_text(tmp_path / "other.txt", "not staged")  # not an output of the run
        assert sorted(os.listdir(tmp_path))[2:] == ["other.txt"]  # two temporary files first
        staged.commit()
    assert sorted(os.listdir(tmp_path)) == ["a.csv", "b.tif", "other.txt"]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_staged_outputs_without_commit_leave_nothing(tmp_path, error):
    paths = [tmp_path / "a.csv", tmp_path / "b.tif"]
    paths[0].write_text("previous")
    with pytest.raises(error):
        with StagedOutputs(paths):
            write_text(paths[0], "new")
            writer = TiffStackWriter(paths[1], (4, 4), np.uint16, n_frames=2)
            writer.write(np.zeros((1, 4, 4), np.uint16))
            raise error()  # the writer is never closed: its file goes too
    assert os.listdir(tmp_path) == ["a.csv"] and paths[0].read_text() == "previous"


def test_staged_outputs_undo_the_renames_when_one_fails(tmp_path, monkeypatch):
    paths = [tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"]
    paths[0].write_text("old a")
    replace = os.replace

    def failing(src, dst):
        if os.path.basename(dst) == "c.csv":
            raise OSError(28, "No space left on device")
        replace(src, dst)

    with pytest.raises(OutputError, match="No space left"):
        with StagedOutputs(paths) as staged:
            for p in paths:
                write_text(p, "new")
            monkeypatch.setattr(os, "replace", failing)
            staged.commit()
    monkeypatch.setattr(os, "replace", replace)
    assert os.listdir(tmp_path) == ["a.csv"] and paths[0].read_text() == "old a"


def test_remove_stale_temps_only_of_dead_writers(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "aligned.tif"
    stale = [tmp_path / f".aligned.tif.tmp-{dead.pid}-0badcafe.tif",
             tmp_path / f".aligned.tif.tmp-{dead.pid}-0badcafe.old.tif"]
    kept = [tmp_path / f".aligned.tif.tmp-{os.getpid()}-0badcafe.tif",  # a running writer
            tmp_path / f".aligned.tif.tmp-{dead.pid}-0badcafe.csv",  # not this output's
            tmp_path / f".other.tif.tmp-{dead.pid}-0badcafe.tif", tmp_path / "aligned.tif.tmp-1-a"]
    for p in stale + kept:
        p.write_text("x")
    assert sorted(remove_stale_temps([out])) == sorted(stale)
    assert sorted(os.listdir(tmp_path)) == sorted(p.name for p in kept)


def test_output_lock_refuses_a_second_holder_and_names_it(tmp_path):
    lock = tmp_path / ".xcorr.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom xcorr_app.io._lock import OutputLock\n"
         f"with OutputLock({str(lock)!r}, 'x'):\n    print('held', flush=True)\n"
         "    sys.stdin.read()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(OutputError, match=rf"output folder o is being written by another "
                                              rf"xcorr run \(pid {holder.pid}\)"):
            OutputLock(lock, "output folder o").acquire()
    finally:
        holder.communicate("")
    assert not lock.exists()  # removed by its holder
    with OutputLock(lock, "o"):
        assert lock.read_text() == f"{os.getpid()}\n"
        with pytest.raises(OutputError, match=rf"pid {os.getpid()}"):
            OutputLock(lock, "o").acquire()
    assert not lock.exists()


def test_a_lock_left_by_a_killed_run_is_taken_over(tmp_path):
    lock = tmp_path / ".xcorr.lock"
    lock.write_text("999999999\n")  # a file, but nobody holds it
    with OutputLock(lock, "o"):
        assert lock.read_text() == f"{os.getpid()}\n"
    assert not lock.exists()


@pytest.mark.parametrize("outputs, inputs, words", [
    (["in.tif"], ["in.tif"], "output in.tif is the input"),
    (["link.tif"], ["in.tif"], "is the input"),
    (["hard.tif"], ["in.tif"], "is the input"),
    (["d/x.tif"], ["d"], "inside the input folder"),
    (["d/sub/x.tif"], ["d"], "inside the input folder"),
    (["dlink/x.tif"], ["d"], "inside the input folder"),
    (["in.tif/x.csv"], ["in.tif"], "output folder in.tif is the input"),
])
def test_check_apart_refuses_outputs_on_inputs(tmp_path, monkeypatch, outputs, inputs, words):
    monkeypatch.chdir(tmp_path)
    Path("in.tif").write_text("data")
    Path("d").mkdir()
    Path("link.tif").symlink_to("in.tif")
    Path("dlink").symlink_to("d")
    os.link("in.tif", "hard.tif")
    with pytest.raises(OutputError, match=words):
        check_apart(outputs, inputs)


def test_check_apart_allows_outputs_beside_inputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("in.tif").write_text("data")
    Path("d").mkdir()
    check_apart(["out.tif", "in_xcorr/shifts.csv", "d_xcorr/aligned.tif", "missing/x"],
                ["in.tif", "d", "not-there.tif"])
    check_apart(["in.tif"], ["d"])  # an input folder's parent is not inside it


def test_output_run_failure_leaves_no_folder_lock_or_temp(tmp_path):
    out = tmp_path / "a" / "b"
    with pytest.raises(RuntimeError):
        with OutputRun([out / "x.csv", out / "y.csv"], lock=out / ".xcorr.lock"):
            assert (out / ".xcorr.lock").exists()
            write_text(out / "x.csv", "x")
            raise RuntimeError
    assert os.listdir(tmp_path) == []
    (tmp_path / "keep").mkdir()
    with pytest.raises(RuntimeError):
        with OutputRun([tmp_path / "keep" / "x.csv"]):
            raise RuntimeError
    assert os.listdir(tmp_path / "keep") == []  # a folder it did not make stays


def test_output_run_commits_on_a_clean_exit_and_refuses_a_second_writer(tmp_path):
    out = tmp_path / "o"
    with OutputRun([out / "x.csv"]) as run:
        write_text(out / "x.csv", "x")
        with pytest.raises(OutputError, match=rf"output folder {out} is being written by "
                                              rf"another xcorr run \(pid {os.getpid()}\)"):
            with OutputRun([out / "y.csv"]):
                pass
        assert os.listdir(out)[0].startswith(".")
    assert run.late_signal is None and os.listdir(out) == ["x.csv"]
    with pytest.raises(OutputError, match="exists; pass force=True"):
        with OutputRun([out / "x.csv"]):
            pass
    assert os.listdir(out) == ["x.csv"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_output_run_turns_stop_signals_into_interrupted(tmp_path, sig):
    # the handler a terminal's process has (a test run in the background may ignore SIGINT)
    default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
    previous = signal.signal(sig, default)
    out = tmp_path / "o"
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            with OutputRun([out / "x.csv"]):
                write_text(out / "x.csv", "x")
                os.kill(os.getpid(), sig)
                time.sleep(5)
        assert signal.getsignal(sig) is default
    finally:
        signal.signal(sig, previous)
    assert isinstance(info.value, Interrupted) and info.value.signum == sig
    assert not out.exists()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_output_run_stop_signal_swallowed_by_a_callback_still_stops_it(tmp_path):
    """A signal whose exception Python swallows (raised inside a weakref callback or
    ``__del__``: "Exception ignored in ...") must not let the run commit: the device suite
    once saw SIGHUP exit 0 with the outputs written."""
    import weakref

    class Thing:
        pass

    out = tmp_path / "o"
    with pytest.raises(Interrupted) as info:
        with OutputRun([out / "x.csv"]):
            write_text(out / "x.csv", "x")
            def signal_inside(ref):
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # (the handler runs here, inside the callback)
                    pass

            thing = Thing()
            ref = weakref.ref(thing, signal_inside)
            del thing  # the callback runs now; Python prints the exception and goes on
            assert ref() is None
    assert info.value.signum == signal.SIGTERM
    assert not out.exists()


def test_output_run_signal_during_the_renames_waits_for_them(tmp_path, monkeypatch):
    out = tmp_path / "o"
    replace = os.replace

    def replace_then_signal(src, dst):
        replace(src, dst)
        if os.path.basename(dst) == "x.csv":
            os.kill(os.getpid(), signal.SIGTERM)

    with OutputRun([out / "x.csv", out / "y.csv"]) as run:
        write_text(out / "x.csv", "x")
        write_text(out / "y.csv", "y")
        monkeypatch.setattr(os, "replace", replace_then_signal)
        run.commit()
        monkeypatch.setattr(os, "replace", replace)
    assert run.late_signal == signal.SIGTERM
    assert sorted(os.listdir(out)) == ["x.csv", "y.csv"]


def test_output_run_signal_while_the_lock_is_taken_leaves_no_lock_file(tmp_path, monkeypatch):
    """A stop signal between the lock file's creation and the lock's record (CI once left
    ``.xcorr.lock`` behind after a Ctrl-C) waits until the lock is held, then stops the run,
    whose cleaning up deletes the file and the folder it made."""
    import xcorr_app.io._lock as lock_module

    out = tmp_path / "o"
    truncate = os.ftruncate

    def truncate_then_signal(fd, length):  # (after the flock, before the lock is recorded)
        os.kill(os.getpid(), signal.SIGTERM)
        truncate(fd, length)

    monkeypatch.setattr(lock_module.os, "ftruncate", truncate_then_signal)
    with pytest.raises(Interrupted) as info:
        with OutputRun([out / "x.csv"]):
            pytest.fail("the run went on past a stop signal")
    assert info.value.signum == signal.SIGTERM
    assert not out.exists()


def test_output_run_leaves_ignored_signals_ignored(tmp_path):
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    try:
        with OutputRun([tmp_path / "x.csv"]):
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            write_text(tmp_path / "x.csv", "x")
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert os.listdir(tmp_path) == ["x.csv"]
