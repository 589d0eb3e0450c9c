"""Tests of xcorr_app.io._writer: safe output writing."""

import os

import numpy as np
import pytest
import tifffile

from xcorr_app.errors import OutputError
from xcorr_app.io._writer import (TiffStackWriter, atomic_path, prepare_outputs, write_text,
                               write_tiff)
from xcorr_app.io._reader import open_stack


def test_prepare_outputs_creates_missing_folders(tmp_path):
    target = tmp_path / "a" / "b" / "shifts.csv"
    prepare_outputs([target, tmp_path / "a" / "reg.tif"], force=False)
    assert target.parent.is_dir()
    assert os.listdir(target.parent) == []  # the writability probe is removed


def test_prepare_outputs_existing_file_needs_force(tmp_path):
    target = tmp_path / "shifts.csv"
    target.write_text("old")
    with pytest.raises(OutputError, match=r"shifts\.csv exists; pass --force to overwrite"):
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

