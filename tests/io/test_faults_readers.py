"""The readers' faults (io/_formats.py, _zarr.py, _hdf5.py): chunks a Zarr store or an HDF5
dataset never holds (never written, lost, a store announcing more frames than it holds) are
named in one note and their frames flagged, not reported only as "constant frames"; an HDF5
file another program holds open for writing is said to be locked, not damaged."""

import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from scipy import ndimage as ndi

from xcorr_app import align
from xcorr_app.errors import InputError
from xcorr_app.io import open_stack

zarr = pytest.importorskip("zarr")
h5py = pytest.importorskip("h5py")


def _frames(n=12, shape=(48, 40), dtype=np.float32):
    """``n`` frames of one smooth scene, drifting by whole pixels (seed 7)."""
    base = ndi.gaussian_filter(np.random.default_rng(7).random((shape[0] + 8, shape[1] + 8)), 2)
    frames = np.stack([base[k % 3:k % 3 + shape[0], (k % 4):(k % 4) + shape[1]]
                       for k in range(n)])
    frames = (frames - frames.min()) / (frames.max() - frames.min())
    return (frames * 1000).astype(dtype) if np.dtype(dtype).kind in "ui" else frames.astype(dtype)


def _zarr(path, frames, chunks, **kw):
    a = zarr.create_array(str(path), shape=frames.shape, dtype=frames.dtype, chunks=chunks, **kw)
    a[:] = frames
    return a


def _drop(path, *keys):
    for key in keys:
        os.remove(os.path.join(path, key))


def _absent_notes(src):
    return [n for n in src.notes if "not stored" in n or "no data stored" in n]


@pytest.mark.parametrize("fmt, kw, dtype", [
    (3, {}, np.float32),                    # compressed (zarr reads it)
    (3, {"compressors": None}, np.uint16),  # raw chunks (read by pread)
    (2, {}, np.int16),                      # v2, keys 3.0.0
    (2, {"compressors": None}, np.float64),
])
def test_missing_zarr_chunks_are_named_and_flagged(tmp_path, fmt, kw, dtype):
    path = tmp_path / "s.zarr"
    _zarr(path, _frames(12, dtype=dtype), (2, 48, 40), zarr_format=fmt, **kw)
    sep = "/" if fmt == 3 else "."
    _drop(path, *(("c/" if fmt == 3 else "") + sep.join([k, "0", "0"]) for k in ("1", "4")))
    with open_stack(path) as src:
        notes = _absent_notes(src)
        assert np.flatnonzero(src.frames_absent).tolist() == [2, 3, 8, 9]
    assert len(notes) == 1, src.notes
    assert "frames 2-3, 8-9 (4 of 12 frames" in notes[0] and "fill value 0" in notes[0]


def test_a_store_announcing_more_frames_than_it_holds(tmp_path):
    path = tmp_path / "half.zarr"
    frames = _frames(40)
    a = zarr.create_array(str(path), shape=frames.shape, dtype=frames.dtype, chunks=(4, 48, 40))
    a[:20] = frames[:20]
    res = align(str(path), device="cpu", quality=False, verify=False, boundary="linear")
    assert any("no data stored for frames 20-39 (20 of 40 frames" in n
               for n in res.settings["notes"]), res.settings["notes"]
    assert np.isnan(res.shifts[20:]).all() and res.low_confidence[20:].all()
    assert not res.low_confidence[:20].any() and np.isfinite(res.shifts[:20]).all()


def test_a_complete_store_says_nothing(tmp_path):
    for fmt in (2, 3):
        path = tmp_path / f"full{fmt}.zarr"
        _zarr(path, _frames(6), (1, 24, 40), zarr_format=fmt)
        with open_stack(path) as src:
            assert not _absent_notes(src) and not src.frames_absent.any()


def test_chunks_missing_in_part_are_a_note_not_a_flag(tmp_path):
    """Chunks that tile a frame: a missing tile is named in a note, but the frame is not
    flagged (Zarr 3 leaves out tiles of the fill value alone: a dark corner of an ordinary
    store is no loss, and flagging it would interpolate good shifts)."""
    path = tmp_path / "tiles.zarr"
    _zarr(path, _frames(8), (2, 24, 20))
    _drop(path, "c/2/1/1")
    with open_stack(path) as src:
        notes = _absent_notes(src)
        assert np.flatnonzero(src.frames_absent).tolist() == [4, 5]
    assert len(notes) == 1 and "part of frames 4-5 is not stored" in notes[0]
    res = align(str(path), device="cpu", quality=False, verify=False, boundary="linear")
    assert not res.low_confidence.any()
    assert any("part of frames 4-5 is not stored" in n for n in res.settings["notes"])


def test_missing_chunks_of_a_channel_and_plane_map_to_their_frames(tmp_path):
    """(T, C, Z, Y, X) chunked a plane each: a lost chunk touches one frame of one channel."""
    path = tmp_path / "tczyx.zarr"
    a = zarr.create_array(str(path), shape=(4, 2, 3, 16, 16), dtype="u2",
                          chunks=(1, 1, 1, 16, 16), dimension_names=list("tczyx"))
    a[:] = 1
    _drop(path, "c/2/1/0/0/0", "c/3/0/2/0/0")  # t 2, c 1, z 0; t 3, c 0, z 2
    for channel, z, want in ((0, None, [11]), (1, None, [6]), (1, 0, [2]), (0, 0, []),
                             (0, 2, [3])):
        spec = str(path) if z is None else f"{path}?z={z}"
        with open_stack(spec, channel=channel) as src:
            assert np.flatnonzero(src.frames_absent).tolist() == want, (channel, z)
            assert len(_absent_notes(src)) == (1 if want else 0)


def test_sharded_zarr_missing_shards(tmp_path):
    path = tmp_path / "sharded.zarr"
    frames = _frames(8, dtype=np.uint16)
    a = zarr.create_array(str(path), shape=frames.shape, dtype=frames.dtype,
                          chunks=(1, 48, 40), shards=(4, 48, 40))
    a[:4] = frames[:4]
    with open_stack(path) as src:
        assert np.flatnonzero(src.frames_absent).tolist() == [4, 5, 6, 7]


@pytest.mark.parametrize("compression, chunks, dtype, absent, wholly, partly", [
    (None, (4, 48, 40), np.float32, [8, 9, 10, 11], "frames 8-11", None),  # read by pread
    ("gzip", (1, 48, 40), np.uint16, [6, 7, 8], "frames 6-8", None),  # read by h5py
    (None, (3, 24, 40), np.int16, list(range(6, 12)), "frames 6-8", "frames 9-11"),  # tiles
])
def test_unwritten_hdf5_chunks_are_named(tmp_path, compression, chunks, dtype, absent, wholly,
                                         partly):
    path = tmp_path / "m.h5"
    frames = _frames(12, dtype=dtype)
    with h5py.File(path, "w") as f:
        d = f.create_dataset("scan/data", shape=frames.shape, dtype=dtype, chunks=chunks,
                             compression=compression, fillvalue=3)
        d[:6] = frames[:6]
        if partly:
            d[9:, :24] = frames[9:, :24]  # (the top halves of 9-11 alone)
        elif chunks[0] == 1:
            d[9:] = frames[9:]
    with open_stack(f"{path}:/scan/data") as src:
        notes = _absent_notes(src)
        assert np.flatnonzero(src.frames_absent).tolist() == absent
    assert any(f"m.h5:/scan/data: no data stored for {wholly}" in n and "fill value 3" in n
               for n in notes), notes
    assert len(notes) == 1 + bool(partly)
    if partly:
        assert any(f"part of {partly} is not stored" in n for n in notes)


def test_a_contiguous_dataset_never_written(tmp_path):
    path = tmp_path / "empty.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("data", shape=(5, 16, 16), dtype="f4")
    with open_stack(path) as src:
        assert src.frames_absent.all() and "frames 0-4 (5 of 5 frames" in _absent_notes(src)[0]
    with h5py.File(path, "w") as f:
        f["data"] = np.ones((5, 16, 16), "f4")
    with open_stack(path) as src:
        assert not src.frames_absent.any() and not _absent_notes(src)


#: a child that holds ``sys.argv[1]`` open for writing until its stdin closes
HOLD = """
import sys, h5py
f = h5py.File(sys.argv[1], "a")
print("open", flush=True)
sys.stdin.read()
"""


def test_a_file_open_for_writing_elsewhere_is_locked_not_damaged(tmp_path):
    if os.environ.get("HDF5_USE_FILE_LOCKING", "").upper() == "FALSE":
        pytest.skip("HDF5 file locking is off here")
    path = tmp_path / "live.h5"
    with h5py.File(path, "w") as f:
        f["data"] = np.ones((3, 8, 8), "u2")
    child = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "open"
        with pytest.raises(InputError) as err:
            open_stack(path)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
    text = str(err.value)
    assert "another program holds it open for writing" in text
    assert "HDF5_USE_FILE_LOCKING=FALSE" in text and "uncorrupted" not in text
    with open_stack(path) as src:  # (the writer gone: read as usual)
        assert src.n_frames == 3


CRASH = """
import os, sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "w", libver="latest")
f["data"] = np.ones((3, 8, 8), "u2")
f.flush()
os._exit(0)
"""


def test_a_file_its_writer_left_open_names_h5clear(tmp_path):
    path = tmp_path / "crashed.h5"
    subprocess.run([sys.executable, "-c", CRASH, str(path)], check=True, timeout=60)
    with pytest.raises(InputError, match="marked open for writing .* h5clear -s"):
        open_stack(path)


@pytest.mark.slow
def test_finding_missing_chunks_costs_little_beside_reading(tmp_path):
    """A store of 4000 chunks (a frame each): its stat per chunk takes a small part of a
    read of the store."""
    path = tmp_path / "many.zarr"
    _zarr(path, np.ones((4000, 32, 32), np.uint16), (1, 32, 32), compressors=None)
    from xcorr_app.io._zarr import absent_chunks

    a = zarr.open(str(path), mode="r")
    t0 = time.perf_counter()
    assert absent_chunks(a) is None
    found = time.perf_counter() - t0
    t0 = time.perf_counter()
    a[:]
    read = time.perf_counter() - t0
    assert found < 0.25 * read, (found, read)
    shutil.rmtree(path)


def test_a_compression_without_its_decoder_names_what_to_install(tmp_path, monkeypatch):
    """A whole TIFF whose compression has no decoder here (LZW without imagecodecs) is not
    called damaged ("copy the file again"): one line names the package to install; HDF5's
    missing filter plugins likewise."""
    import tifffile

    from xcorr_app import align
    from xcorr_app.errors import InputError
    from xcorr_app.io._tiff import missing_decoder

    path = tmp_path / "lzw.tif"
    tifffile.imwrite(path, np.zeros((6, 16, 16), np.uint16), compression="zlib",
                     metadata={"axes": "TYX"})

    def undecodable(self, *args, **kwargs):
        raise ValueError("<COMPRESSION.LZW: 5> requires the 'imagecodecs' package")

    monkeypatch.setattr(tifffile.TiffFile, "asarray", undecodable)
    with pytest.raises(InputError) as info:
        align(path, device="cpu", max_shift=2)
    said = str(info.value)
    assert "xcorr-app[codecs]" in said and "imagecodecs" in said and "damaged" not in said
    for text, package in (("Can't synchronously read data (can't open directory "
                           "(/usr/local/lib/plugin))", "hdf5plugin"),
                          ("required filter 'zstd' is not registered", "hdf5plugin"),
                          ("No module named 'compression'", "imagecodecs")):
        exc = ModuleNotFoundError(text, name="compression") if "module" in text \
            else OSError(text)
        assert package in missing_decoder(exc)
    for other in (OSError("bad chunk: inflate failed"), ModuleNotFoundError("no", name="yaml"),
                  OSError("plugin says hello")):
        assert missing_decoder(other) is None
