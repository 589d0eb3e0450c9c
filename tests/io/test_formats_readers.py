"""Zarr, OME-Zarr, HDF5 and OME-TIFF stacks written by their own libraries: every reader gives
the frames, and ``align`` the shifts, of the same frames given as a NumPy array (2-D + T,
multi-channel, 5-D TCZYX), streamed in chunks; ``xcorr info`` describes each."""

import numpy as np
import pytest
import tifffile

from xcorr_app import align
from xcorr_app.errors import InputError
from xcorr_app.io import HoldsVolumes, describe, open_stack, source_path

from cli_helpers import assert_clean_error, xcorr
from synthetic import drift_stack

zarr = pytest.importorskip("zarr")
h5py = pytest.importorskip("h5py")


@pytest.fixture(scope="module")
def movie():
    """``(T, C, Z, Y, X)`` uint16: channel 0 drifts (the truth), channel 1 its negative image,
    plane 1 of Z the same frames rolled by 3 rows."""
    stack, _ = drift_stack(np.random.default_rng(5), n=8, shape=(48, 56))
    other = (stack.max() - stack).astype(np.uint16)
    plane0 = np.stack([stack, other], axis=1)
    return np.stack([plane0, np.roll(plane0, 3, axis=-2)], axis=2)


def write_ome_zarr(path, data, version):
    """An OME-Zarr image of two levels written with zarr itself (the OME-NGFF layout)."""
    root = zarr.open_group(str(path), mode="w", zarr_format=version)
    axes = [{"name": n, "type": t} for n, t in zip("tczyx", ("time", "channel", "space",
                                                             "space", "space"))]
    for a in axes[2:]:
        a["unit"] = "micrometer"
    datasets = []
    for level, step in enumerate((1, 2)):
        root.create_array(str(level), data=np.ascontiguousarray(data[..., ::step, ::step]),
                          chunks=(3, 1, 1, *data.shape[-2:]))
        datasets.append({"path": str(level), "coordinateTransformations": [
            {"type": "scale", "scale": [1, 1, 2.0, 0.4 * step, 0.4 * step]}]})
    meta = {"multiscales": [{"version": "0.4", "axes": axes, "datasets": datasets}],
            "omero": {"channels": [{"label": "GCaMP"}, {"label": "tdTomato"}]}}
    root.attrs.update(meta if version == 2 else {"ome": {"version": "0.5", **meta}})
    return path


def shifts(path_or_array, **kw):
    return align(path_or_array, device="cpu", max_shift=8, chunk_frames=3, **kw).shifts


@pytest.mark.parametrize("version", [2, 3])
def test_ome_zarr_channel_and_plane_as_the_array(tmp_path, movie, version):
    path = write_ome_zarr(tmp_path / "movie.ome.zarr", movie, version)
    with open_stack(source_path(path, z=1), channel=1) as src:
        assert src.axes == "TCZYX" and src.n_frames == 8
        np.testing.assert_array_equal(src.read(2, 7), movie[2:7, 1, 1])
        assert src.channel_names == ["GCaMP", "tdTomato"]
        assert src.pixel_size == (0.4, 0.4, "micrometer")
        assert any("level 0" in n for n in src.notes)
    # without --z its T x Z planes are volumes: refused where frames are registered
    with pytest.raises(HoldsVolumes, match="8 time points of 2 Z planes"):
        shifts(str(path), channel=0)
    np.testing.assert_array_equal(shifts(source_path(path, z=0), channel=0),
                                  shifts(movie[:, 0, 0]))


def test_plain_zarr_arrays_v2_and_v3(tmp_path, movie):
    v2 = zarr.create_array(str(tmp_path / "v2.zarr"), data=movie[:, 0, 0], chunks=(3, 16, 56),
                           zarr_format=2)
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("scan/raw", data=movie[:, :, 0], chunks=(2, 1, 48, 56),
                       dimension_names=["t", "c", "y", "x"])
    assert v2.metadata.zarr_format == 2
    with open_stack(tmp_path / "v2.zarr") as src:
        assert src.chunks == (3, 16, 56)
        np.testing.assert_array_equal(src.read(0, 8), movie[:, 0, 0])
    np.testing.assert_array_equal(shifts(str(tmp_path / "g.zarr") + ":/scan/raw", channel=1),
                                  shifts(movie[:, 1, 0]))


def test_hdf5_dataset_by_path_and_by_attributes(tmp_path, movie):
    path = tmp_path / "movie.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("acq/data", data=movie[:, :, 0], chunks=(2, 1, 48, 56),
                              compression="gzip")
        ds.attrs["axes"] = "TCYX"
        ds.attrs["element_size_um"] = [0.5, 0.25]
        f["other/frames"] = movie[:, 0, 0]
    with open_stack(f"{path}:/acq/data", channel=1) as src:
        assert src.pixel_size == (0.5, 0.25, "µm") and src.chunks == (2, 1, 48, 56)
        np.testing.assert_array_equal(src.read(1, 8), movie[1:, 1, 0])
    np.testing.assert_array_equal(shifts(f"{path}:/other/frames"), shifts(movie[:, 0, 0]))


def test_ome_tiff_five_d_by_channel_and_plane(tmp_path, movie):
    path = tmp_path / "movie.ome.tif"
    tifffile.imwrite(path, movie, ome=True, metadata={
        "axes": "TCZYX", "PhysicalSizeX": 0.4, "PhysicalSizeY": 0.4,
        "Channel": {"Name": ["GCaMP", "tdTomato"]}})
    with open_stack(source_path(path, z=1), channel=0) as src:
        assert src.n_frames == 8
        np.testing.assert_array_equal(src.read(0, 8), movie[:, 0, 1])
    d = describe(path)
    assert (d["format"], d["axes"], d["channels"]) == ("OME-TIFF", "TCZYX", 2)
    assert d["channel_names"] == ["GCaMP", "tdTomato"] and d["pixel_size"][:2] == (0.4, 0.4)
    np.testing.assert_array_equal(shifts(source_path(path, z=1), channel=1),
                                  shifts(movie[:, 1, 1]))


def test_info_prints_what_a_file_holds(tmp_path, movie):
    path = write_ome_zarr(tmp_path / "m.ome.zarr", movie, 3)
    res = xcorr("info", path)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "OME-Zarr" in out and "axes TCZYX" in out and "uint16" in out
    assert "chunks 3 x 1 x 1 x 48 x 56" in out and "channels 2 (GCaMP, tdTomato)" in out


@pytest.mark.parametrize("spec, words", [
    ("{h5}", ["2 datasets", "--dataset"]),
    ("{h5}:/nope", ["no dataset /nope", "/a"]),
    ("{zarr}:/scan/nope", ["no array /scan/nope"]),
    ("{h5}:/a?z=0", ["no Z axis"]),
    ("{cut}", ["cannot open", "cut.h5"]),
    ("{junk}", ["cannot open", "junk.zarr"]),
])
def test_bad_files_are_one_line_and_write_nothing(tmp_path, movie, spec, words):
    with h5py.File(tmp_path / "two.h5", "w") as f:
        f["a"], f["b"] = movie[:, 0, 0], movie[:, 1, 0]
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w").create_array("scan/raw",
                                                                      data=movie[:, 0, 0])
    data = (tmp_path / "two.h5").read_bytes()
    (tmp_path / "cut.h5").write_bytes(data[:len(data) // 3])
    (tmp_path / "junk.zarr").mkdir()
    (tmp_path / "junk.zarr" / "zarr.json").write_text("{not json")
    path = spec.format(h5=tmp_path / "two.h5", zarr=tmp_path / "g.zarr",
                       cut=tmp_path / "cut.h5", junk=tmp_path / "junk.zarr")
    assert_clean_error(xcorr("align", path, "--device", "cpu", "--out", tmp_path / "o"),
                       *words)
    assert not (tmp_path / "o").exists()


def test_a_damaged_chunk_names_its_frames(tmp_path, movie):
    arr = zarr.create_array(str(tmp_path / "d.zarr"), data=movie[:, 0, 0], chunks=(4, 48, 56),
                            compressors=zarr.codecs.ZstdCodec())
    (tmp_path / "d.zarr" / "c" / "1" / "0" / "0").write_bytes(b"broken")  # frames 4-7
    assert arr.shape == (8, 48, 56)
    assert_clean_error(xcorr("align", tmp_path / "d.zarr", "--device", "cpu", "--out",
                             tmp_path / "o"), "cannot read frame", "d.zarr", "counted from 0")
    assert not (tmp_path / "o").exists()


def test_hdf5_and_zarr_frames_are_read_straight_into_the_buffer(tmp_path, movie, monkeypatch):
    """h5py's read_direct and zarr's out= fill the caller's buffer (no block allocated and
    copied: most of a one-shot run's reading); axes that need a transpose still read."""
    from xcorr_app.io import ArrayFrames

    with h5py.File(tmp_path / "m.h5", "w") as f:  # (compressed: not memory-mapped)
        f.create_dataset("movie", data=movie, compression="gzip")
        f["movie"].attrs["axes"] = "TCZYX"
        f["swapped"] = np.ascontiguousarray(np.swapaxes(movie[:, 0, 0], 1, 2)).astype(">u2")
        f["swapped"].attrs["axes"] = "TXY"
    zarr.create_array(str(tmp_path / "m.zarr"), data=movie, chunks=(2, 1, 1, 48, 56),
                      dimension_names=list("tczyx"))
    sliced = ArrayFrames._slice
    monkeypatch.setattr(ArrayFrames, "_slice", lambda *a: pytest.fail("read by a block"))
    for path in (source_path(tmp_path / "m.h5", "/movie", z=1), source_path(tmp_path / "m.zarr",
                                                                           z=1)):
        with open_stack(path, channel=1) as src:
            out = np.full((5, 48, 56), 7, np.uint16)
            assert src.read(2, 7, out=out) is out
            np.testing.assert_array_equal(out, movie[2:7, 1, 1])
    monkeypatch.setattr(ArrayFrames, "_slice", sliced)
    with open_stack(source_path(tmp_path / "m.h5", "/swapped")) as src:
        np.testing.assert_array_equal(src.read(0, 8), movie[:, 0, 0])


@pytest.mark.parametrize("chunks", [None, (1, 2, 2, 48, 56), (3, 2, 2, 48, 56),
                                    (1, 1, 1, 48, 56)])
def test_hdf5_stored_uncompressed_is_read_by_pread_on_two_threads(tmp_path, movie, chunks,
                                                                  monkeypatch):
    import os
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "m.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("movie", data=movie, chunks=chunks)
        f["movie"].attrs["axes"] = "TCZYX"
    calls = []
    preadv = os.preadv
    monkeypatch.setattr(os, "preadv", lambda *a: calls.append(a[2]) or preadv(*a))
    with open_stack(source_path(path, "/movie", z=1), channel=1) as src:
        assert src.concurrent_reads and src.chunks == chunks
        out = np.empty((7, 48, 56), np.uint16)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda ab: src.read(*ab, out=out[ab[0] - 1:ab[1] - 1]),
                          [(1, 4), (4, 8)]))
        np.testing.assert_array_equal(out, movie[1:8, 1, 1])
    assert len(calls) >= 7  # (a frame a call: the channel and plane picked within each)


def test_hdf5_types_h5py_converts_are_read_by_h5py(tmp_path):
    """A stored type h5py reads as another (12 bits at an offset of 4, here) is h5py's."""
    t = h5py.h5t.STD_U16LE.copy()
    t.set_precision(12)
    t.set_offset(4)
    frames = np.random.default_rng(1).integers(0, 4096, (3, 8, 10)).astype(np.uint16)
    with h5py.File(tmp_path / "m.h5", "w") as f:
        f.create_dataset("odd", shape=frames.shape, dtype=t)[...] = frames
    with open_stack(source_path(tmp_path / "m.h5", "/odd")) as src:
        assert not src.concurrent_reads
        np.testing.assert_array_equal(src.read(0, 3, out=np.empty_like(frames)), frames)


def test_hdf5_chunks_anywhere_in_the_file_are_read_at_their_offsets(tmp_path, monkeypatch):
    """Many chunks: HDF5 puts its chunk index's nodes between them (and a second dataset's
    chunks, written in turn), so frames are no one run of the file; each is read by pread at
    its chunk's offset."""
    import os

    from xcorr_app.io._hdf5 import stored_offsets

    frames = np.random.default_rng(2).integers(0, 60000, (300, 12, 10)).astype(np.uint16)
    with h5py.File(tmp_path / "m.h5", "w") as f:
        a = f.create_dataset("a", shape=frames.shape, dtype=np.uint16, chunks=(1, 12, 10))
        b = f.create_dataset("b", shape=frames.shape, dtype=np.uint16, chunks=(2, 12, 10))
        for i in range(300):
            a[i], b[i] = frames[i], frames[i] // 2
    with h5py.File(tmp_path / "m.h5", "r") as f:
        steps = np.diff(stored_offsets(f["a"]))
    assert (steps != frames[0].nbytes).any()  # (not one run: what the reader is for)
    calls = []
    preadv = os.preadv
    monkeypatch.setattr(os, "preadv", lambda *a: calls.append(a[2]) or preadv(*a))
    for name, want in (("a", frames), ("b", frames // 2)):
        with open_stack(source_path(tmp_path / "m.h5", "/" + name)) as src:
            assert src.concurrent_reads
            out = np.empty_like(want)
            src.read(0, 300, out=out)
            np.testing.assert_array_equal(out, want)
            np.testing.assert_array_equal(src.read(7, 9), want[7:9])
    assert calls


def test_hdf5_chunks_of_partial_frames_or_never_written_are_read_by_h5py(tmp_path, movie):
    with h5py.File(tmp_path / "m.h5", "w") as f:
        f.create_dataset("partial", data=movie, chunks=(2, 1, 2, 48, 56))
        f.create_dataset("sparse", shape=movie.shape, dtype=movie.dtype, chunks=(1, 2, 2, 48, 56))
        f["sparse"][5] = movie[5]  # (other chunks never written: the fill value)
        for name in ("partial", "sparse"):
            f[name].attrs["axes"] = "TCZYX"
    with open_stack(source_path(tmp_path / "m.h5", "/partial", z=0), channel=0) as src:
        assert not src.concurrent_reads
        np.testing.assert_array_equal(src.read(0, 8), movie[:, 0, 0])
    with open_stack(source_path(tmp_path / "m.h5", "/sparse", z=0), channel=0) as src:
        assert not src.concurrent_reads
        np.testing.assert_array_equal(src.read(4, 6), [np.zeros_like(movie[4, 0, 0]),
                                                       movie[5, 0, 0]])


@pytest.mark.parametrize("order", ["<", ">"])
def test_hdf5_runs_of_frames_are_read_with_pread_into_the_buffer(tmp_path, movie, order,
                                                                 monkeypatch):
    """A dataset's frames go into the caller's buffer by ``os.preadv`` where they are stored
    in the machine's byte order (big-endian ones through h5py), from several threads; the
    frames either way."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    calls = []
    preadv = os.preadv
    monkeypatch.setattr(os, "preadv", lambda *a: calls.append(a[2]) or preadv(*a))
    frames = movie[:, 0, 1]
    with h5py.File(tmp_path / "m.h5", "w") as f:
        f.create_dataset("tyx", data=frames.astype(order + "u2"))
    with open_stack(source_path(tmp_path / "m.h5", "/tyx")) as src:
        out = np.full((9, 48, 56), 5, np.uint16)
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda ab: src.read(*ab, out=out[ab[0] + 1:ab[1] + 1]),
                          [(0, 3), (3, 4), (4, 8)]))
    np.testing.assert_array_equal(out[1:], frames)
    np.testing.assert_array_equal(out[0], 5)  # untouched
    assert len(calls) == (3 if order == "<" else 0)


def test_an_hdf5_file_cut_while_it_is_read_is_one_line(tmp_path, movie):
    frames = movie[:, 0, 0]
    path = tmp_path / "m.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("tyx", data=frames)
    with open_stack(source_path(path, "/tyx")) as src:
        with open(path, "r+b") as fh:
            fh.truncate(path.stat().st_size - frames[0].nbytes // 2)
        out = np.empty((8, 48, 56), np.uint16)
        src.read(0, 4, out=out[:4])
        np.testing.assert_array_equal(out[:4], frames[:4])
        with pytest.raises(InputError,
                           match="ended while it was read .*; copy it again from the source"):
            src.read(4, 8, out=out[4:])


@pytest.mark.parametrize("version, chunks", [(3, (1, 2, 2, 48, 56)), (3, (3, 2, 2, 48, 56)),
                                             (3, (1, 1, 1, 48, 56)), (2, (2, 2, 2, 48, 56))])
def test_zarr_chunks_stored_as_they_are_are_read_by_pread(tmp_path, movie, version, chunks,
                                                          monkeypatch):
    """Uncompressed chunks of whole frames: each chunk file's bytes read by pread into the
    caller's buffer, on several threads; the frames as zarr gives them."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    arr = zarr.create_array(str(tmp_path / "m.zarr"), shape=movie.shape, dtype=movie.dtype,
                            chunks=chunks, compressors=None, zarr_format=version,
                            dimension_names=list("tczyx") if version == 3 else None)
    arr[:] = movie
    if version == 2:
        arr.attrs["_ARRAY_DIMENSIONS"] = list("tczyx")
    calls = []
    preadv = os.preadv
    monkeypatch.setattr(os, "preadv", lambda *a: calls.append(a[2]) or preadv(*a))
    with open_stack(source_path(tmp_path / "m.zarr", z=1), channel=1) as src:
        assert src.concurrent_reads
        out = np.full((9, 48, 56), 5, np.uint16)
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda ab: src.read(*ab, out=out[ab[0] + 1:ab[1] + 1]),
                          [(0, 3), (3, 4), (4, 8)]))
        np.testing.assert_array_equal(src.read(2, 5), movie[2:5, 1, 1])
    np.testing.assert_array_equal(out[1:], movie[:, 1, 1])
    np.testing.assert_array_equal(out[0], 5)
    assert calls


def test_zarr_chunks_zarr_must_decode_are_read_by_zarr(tmp_path, movie):
    """Compressed, big-endian or frame-splitting chunks: no pread; chunks never written (the
    fill value): zarr reads the reads that meet one."""
    frames = movie[:, 0, 0]
    cases = {
        "zstd": dict(chunks=(1, 48, 56)),
        "big": dict(chunks=(1, 48, 56), compressors=None, dtype=">u2", zarr_format=2),
        "half": dict(chunks=(1, 24, 56), compressors=None),
        "sparse": dict(chunks=(1, 48, 56), compressors=None),
    }
    for name, kw in cases.items():
        kw.setdefault("dtype", frames.dtype)
        arr = zarr.create_array(str(tmp_path / f"{name}.zarr"), shape=frames.shape, **kw)
        if name == "sparse":
            arr[5] = frames[5]  # (the others never written: the fill value)
            want = np.zeros_like(frames)
            want[5] = frames[5]
        else:
            arr[:] = frames
            want = frames
        with open_stack(str(tmp_path / f"{name}.zarr")) as src:
            assert src.concurrent_reads == (name == "sparse"), name
            np.testing.assert_array_equal(src.read(5, 6), want[5:6], err_msg=name)
            out = np.empty_like(frames)
            np.testing.assert_array_equal(src.read(0, 8, out=out), want, err_msg=name)


def test_a_zarr_chunk_cut_while_it_is_read_is_one_line(tmp_path, movie):
    frames = movie[:, 0, 0]
    arr = zarr.create_array(str(tmp_path / "m.zarr"), data=frames, chunks=(1, 48, 56),
                            compressors=None)
    with open_stack(str(tmp_path / "m.zarr")) as src:
        chunk = tmp_path / "m.zarr" / arr.metadata.encode_chunk_key((6, 0, 0))
        chunk.write_bytes(chunk.read_bytes()[:100])
        out = np.empty((8, 48, 56), np.uint16)
        src.read(0, 6, out=out[:6])
        np.testing.assert_array_equal(out[:6], frames[:6])
        with pytest.raises(InputError, match="ended while it was read .*copy it again"):
            src.read(6, 8, out=out[6:])


@pytest.mark.parametrize("case", ["multiscales a string", "a list of strings",
                                  "omero channels a string", "a scale of letters"])
def test_malformed_ome_zarr_metadata_is_one_line(tmp_path, movie, case):
    """OME-Zarr metadata of the wrong shapes stopped info and align with an internal error
    (AttributeError, ValueError); the level-0 array read as PATH:0 still aligns."""
    path = tmp_path / "m.ome.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    group.create_array("0", data=movie[:, 0, 0], chunks=(4, *movie.shape[-2:]))
    meta = {"multiscales": [{"version": "0.4", "axes": [{"name": "t"}, {"name": "y"},
                                                        {"name": "x"}],
                             "datasets": [{"path": "0", "coordinateTransformations": [
                                 {"type": "scale", "scale": [1.0, 0.5, 0.5]}]}]}]}
    if case == "multiscales a string":
        meta["multiscales"] = "nonsense"
    elif case == "a list of strings":
        meta["multiscales"] = ["a", "b"]
    elif case == "omero channels a string":
        meta["omero"] = {"channels": "bad"}
    else:  # (read where the axes name a unit)
        for axis in meta["multiscales"][0]["axes"][1:]:
            axis["unit"] = "micrometer"
        meta["multiscales"][0]["datasets"][0]["coordinateTransformations"][0]["scale"] = "iii"
    group.attrs.put(meta)
    with pytest.raises(InputError, match="its OME-Zarr metadata .* is malformed"):
        open_stack(path)
    for command in (("info", path), ("align", path, "--device", "cpu", "--out", tmp_path / "o")):
        res = xcorr(*command)
        assert res.returncode == 2
        assert_clean_error(res, "is malformed", "PATH:0")
    assert align(f"{path}:0", device="cpu", max_shift=6).n_frames == len(movie)


def test_a_npy_file_is_read_as_the_other_array_formats(tmp_path, movie):
    """info and align of a .npy (volumes.md lists it) said "cannot read as a TIFF image"; a
    4-D one names its axes (AxesUnknown, as HDF5 and Zarr), --axes TZYX makes it volumes."""
    frames = movie[:, 0, 0]
    np.save(tmp_path / "m.npy", frames)
    d = describe(tmp_path / "m.npy")
    assert (d["format"], d["axes"], d["shape"]) == ("NumPy .npy", "TYX", frames.shape)
    np.testing.assert_array_equal(shifts(tmp_path / "m.npy"), shifts(frames))
    np.save(tmp_path / "v.npy", movie[:, 0])  # (T, Z, Y, X)
    res = xcorr("align", tmp_path / "v.npy", "--out", tmp_path / "o", "--device", "cpu")
    assert_clean_error(res, "4-D array", "--axes TZYX")
    res = xcorr("align", tmp_path / "v.npy", "--axes", "TZYX", "--out", tmp_path / "o",
                "--device", "cpu", "-q")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "o" / "shifts.csv").read_text().startswith("t,dz,dy,dx")


def test_an_empty_or_npz_file_named_npy_is_one_line(tmp_path):
    """An empty .npy stopped info with an internal EOFError, an .npz named .npy with an
    AttributeError."""
    (tmp_path / "empty.npy").write_bytes(b"")
    np.savez(tmp_path / "arch.npz", a=np.zeros((3, 8, 8)))
    (tmp_path / "arch.npz").rename(tmp_path / "arch.npy")
    for name, words in (("empty.npy", "cannot read"), ("arch.npy", "is an .npz archive")):
        with pytest.raises(InputError, match=words):
            open_stack(tmp_path / name)
        assert_clean_error(xcorr("info", tmp_path / name), words)
