"""Tests of xcorr_app.io._reader: lazy TIFF input."""

import contextlib
import hashlib

import numpy as np
import pytest
import tifffile

from xcorr_app.errors import InputError
from xcorr_app.io import SUPPORTED_DTYPES, describe, open_stack, read_image
from xcorr_app.io._reader import natural_key
from xcorr_app.streaming import map_chunks


def chunks_of(src, chunk_frames):
    """``(start, frames)`` of an open source through the one chunk loop."""
    return list(map_chunks(lambda: contextlib.nullcontext(src), chunk_frames, lambda a, f: f))

H, W = 6, 7


def stack_of(dtype, n=5, shape=(H, W), seed=0):
    rng = np.random.default_rng(seed)
    return (rng.random((n, *shape)) * 200).astype(dtype)


def write(path, data, **kwargs):
    """Write grayscale data: tifffile would guess (3|4, H, W) to be color samples."""
    kwargs.setdefault("photometric", "minisblack")
    tifffile.imwrite(path, data, **kwargs)
    return path


def read_all(path, channel=None):
    with open_stack(path, channel) as src:
        return src.read(0, src.n_frames)


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
def test_every_supported_dtype(tmp_path, dtype):
    data = stack_of(dtype)
    with open_stack(write(tmp_path / "s.tif", data)) as src:
        assert (src.n_frames, src.frame_shape, src.dtype) == (5, (H, W), dtype)
        assert src.memory_mapped
        got = src.read(0, 5)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, data)


def test_big_endian_file_reads_in_native_order(tmp_path):
    data = stack_of(np.uint16)
    got = read_all(write(tmp_path / "be.tif", data, byteorder=">"))
    assert got.dtype == np.dtype(np.uint16) and got.dtype.isnative
    np.testing.assert_array_equal(got, data)


@pytest.mark.parametrize("byteorder", ["<", ">"])
@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
def test_read_into_a_buffer_equals_the_data(tmp_path, dtype, byteorder, monkeypatch):
    """Reads into a caller's buffer (the prefetcher's) go through pread where the pixels are in
    the machine's byte order, else through the memory map; both give the frames, in pieces
    and from several threads, and never touch frames outside the range."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    calls = []
    preadv = os.preadv
    monkeypatch.setattr(os, "preadv", lambda *a: calls.append(a[2]) or preadv(*a))
    data = stack_of(dtype, n=9, shape=(37, 19), seed=3)
    with open_stack(write(tmp_path / "s.tif", data, byteorder=byteorder)) as src:
        out = np.full((9, 37, 19), 5, dtype)
        with ThreadPoolExecutor(3) as pool:
            list(pool.map(lambda ab: src.read(*ab, out=out[ab[0] + 1:ab[1] + 1]),
                          [(0, 3), (3, 4), (4, 8)]))
    np.testing.assert_array_equal(out[1:], data[:8])
    np.testing.assert_array_equal(out[0], np.full((37, 19), 5, dtype))  # untouched
    native = byteorder == "<" or np.dtype(dtype).itemsize == 1  # little-endian machines
    assert bool(calls) == native
    if native:
        assert min(calls) > 0


@pytest.mark.parametrize("dtype", ["int32", "uint32", "bool", "complex64"])
def test_unsupported_dtype_is_refused(tmp_path, dtype):
    path = write(tmp_path / "bad.tif", stack_of(dtype))
    with pytest.raises(InputError, match=r"bad\.tif has pixel type .*convert it to one of"):
        open_stack(path)


def test_multipage_lazy_read_and_chunks(tmp_path):
    data = stack_of(np.uint16, n=10)
    with open_stack(write(tmp_path / "s.tif", data)) as src:
        assert len(src) == 10 and src.paths == [tmp_path / "s.tif"] and src.notes == []
        np.testing.assert_array_equal(src.read(3, 7), data[3:7])
        assert src.read(4, 4).shape == (0, H, W)
        chunks = chunks_of(src, 4)
        assert [start for start, _ in chunks] == [0, 4, 8]
        np.testing.assert_array_equal(np.concatenate([c for _, c in chunks]), data)
        assert src.source_name(9) == "s.tif"
        with pytest.raises(IndexError):
            src.read(8, 11)
        with pytest.raises(InputError):
            chunks_of(src, 0)


@pytest.mark.parametrize("compression", [None, "zlib"])
def test_tiled_file_is_its_pages_and_says_its_tiles(tmp_path, compression):
    """A tiled TIFF (edge tiles padded past the frame): its pages are the frames, and
    ``describe`` (``xcorr info``) gives a tile as its chunks, not a whole frame."""
    data = stack_of(np.uint16, n=5, shape=(40, 72))
    path = write(tmp_path / "t.tif", data, tile=(16, 32), compression=compression)
    np.testing.assert_array_equal(read_all(path), data)
    d = describe(path)
    assert (d["frames"], d["frame_shape"], d["shape"]) == (5, (40, 72), (5, 40, 72))
    assert d["chunks"] == (16, 32)


def test_read_after_close_reopens(tmp_path):
    data = stack_of(np.float32)
    src = open_stack(write(tmp_path / "s.tif", data))
    src.close()
    np.testing.assert_array_equal(src.read(1, 3), data[1:3])
    src.close()


def test_compressed_file_is_read_page_by_page(tmp_path, monkeypatch):
    data = stack_of(np.uint16, n=8)
    path = write(tmp_path / "z.tif", data, compression="zlib")
    asked = []
    original = tifffile.TiffFile.asarray

    def spy(self, key=None, **kwargs):
        asked.append(key)
        return original(self, key=key, **kwargs)

    monkeypatch.setattr(tifffile.TiffFile, "asarray", spy)
    with open_stack(path) as src:
        assert not src.memory_mapped
        np.testing.assert_array_equal(src.read(2, 5), data[2:5])
        np.testing.assert_array_equal(np.concatenate([c for _, c in chunks_of(src, 3)]), data)
    assert asked[0] == [2, 3, 4]


def test_folder_natural_sort_case_insensitive_suffix_and_notes(tmp_path):
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in range(1, 13):
        suffix = ".TIF" if i == 11 else ".tiff" if i == 12 else ".tif"
        write(folder / f"frame_{i}{suffix}", np.full((H, W), i, np.uint16))
    (folder / "a.txt").write_text("x")
    (folder / "b.csv").write_text("x")
    with open_stack(folder) as src:
        assert src.n_frames == 12
        assert src.notes == ["skipped 2 non-TIFF files: a.txt, b.csv"]
        assert [p.name for p in src.paths][:3] == ["frame_1.tif", "frame_2.tif", "frame_3.tif"]
        assert src.source_name(9) == "frame_10.tif" and src.source_name(11) == "frame_12.tiff"
        np.testing.assert_array_equal(src.read(0, 12)[:, 0, 0], np.arange(1, 13))
    assert sorted(["f10", "f2", "F1"], key=natural_key) == ["F1", "f2", "f10"]


def test_folder_of_multipage_files_reads_across_files(tmp_path):
    data = stack_of(np.float32, n=7)
    write(tmp_path / "a1.tif", data[:3])
    write(tmp_path / "a2.tif", data[3:4])
    write(tmp_path / "a10.tif", data[4:])
    with open_stack(tmp_path) as src:
        assert src.n_frames == 7 and src.memory_mapped
        np.testing.assert_array_equal(src.read(2, 6), data[2:6])
        assert [src.source_name(i) for i in (2, 3, 4)] == ["a1.tif", "a2.tif", "a10.tif"]
        assert src.source_names() == [src.source_name(i) for i in range(7)]
        np.testing.assert_array_equal(np.concatenate([c for _, c in chunks_of(src, 2)]), data)


@pytest.mark.parametrize("compression", [None, "zlib"])
def test_imagej_hyperstack_channels(tmp_path, compression):
    data = stack_of(np.uint16, n=4 * 2).reshape(4, 2, H, W)  # TCYX
    path = tmp_path / "hyper.tif"
    tifffile.imwrite(path, data, imagej=True, metadata={"axes": "TCYX"}, compression=compression)
    for c in (0, 1):
        np.testing.assert_array_equal(read_all(path, c), data[:, c])
    with open_stack(path, 1) as src:
        np.testing.assert_array_equal(src.read(1, 3), data[1:3, 1])
    with pytest.raises(InputError, match=r"hyper\.tif has 2 channels .*pass channel=K"):
        open_stack(path)
    with pytest.raises(InputError, match="channel 2 is out of range"):
        open_stack(path, 2)


def test_imagej_tzcyx_is_its_planes_t_then_z_marked_as_volumes(tmp_path):
    """Read plane by plane, T then Z (for filter, apply, napari), marked as volumes: a run that
    registers frames refuses them (check_planes); ``?z=K`` reads one plane."""
    from xcorr_app.io import check_planes

    data = stack_of(np.float32, n=3 * 2 * 2).reshape(3, 2, 2, H, W)  # TZCYX
    path = tmp_path / "tz.tif"
    tifffile.imwrite(path, data, imagej=True, metadata={"axes": "TZCYX"})
    np.testing.assert_array_equal(read_all(path, 1), data[:, :, 1].reshape(6, H, W))
    with open_stack(path, 1) as src, \
            pytest.raises(InputError, match="holds volumes: 3 time points of 2 Z planes"):
        check_planes(src)
    np.testing.assert_array_equal(read_all(f"{path}?z=1", 1), data[:, 1, 1])


@pytest.mark.parametrize("axes", ["TCYX", "CTYX"])
@pytest.mark.parametrize("compression", [None, "zlib"])
def test_ome_tiff_channels(tmp_path, axes, compression):
    data = stack_of(np.uint16, n=3 * 2).reshape(*((3, 2) if axes == "TCYX" else (2, 3)), H, W)
    path = tmp_path / "img.ome.tif"
    tifffile.imwrite(path, data, ome=True, metadata={"axes": axes}, photometric="minisblack",
                     compression=compression)
    for c in (0, 1):
        expected = data[:, c] if axes == "TCYX" else data[c]
        np.testing.assert_array_equal(read_all(path, c), expected)
    with pytest.raises(InputError, match="2 channels"):
        open_stack(path)


@pytest.mark.parametrize("planar", [False, True])
@pytest.mark.parametrize("compression", [None, "zlib"])
def test_rgb_samples_are_channels(tmp_path, planar, compression):
    data = stack_of(np.uint8, n=4 * 3).reshape(4, H, W, 3)
    path = tmp_path / "rgb.tif"
    stored = np.moveaxis(data, -1, 1) if planar else data
    tifffile.imwrite(path, stored, photometric="rgb", compression=compression,
                     planarconfig="separate" if planar else "contig")
    np.testing.assert_array_equal(read_all(path, 2), data[..., 2])
    with pytest.raises(InputError, match="3 channels .*channel=K"):
        open_stack(path)


def test_read_image(tmp_path):
    image = stack_of(np.uint16, n=1)[0]
    np.testing.assert_array_equal(read_image(write(tmp_path / "ref.tif", image)), image)
    np.testing.assert_array_equal(read_image(write(tmp_path / "one.tif", image[None])), image)
    with pytest.raises(InputError, match="holds 5 frames; a reference image must be"):
        read_image(write(tmp_path / "many.tif", stack_of(np.uint16)))


# --- errors -------------------------------------------------------------------------------

def test_missing_path(tmp_path):
    with pytest.raises(InputError, match="nope.tif does not exist"):
        open_stack(tmp_path / "nope.tif")


def test_empty_folder(tmp_path):
    with pytest.raises(InputError, match="is empty"):
        open_stack(tmp_path)


def test_folder_without_tiff_files(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "sub").mkdir()
    with pytest.raises(InputError, match=r"no \.tif or \.tiff files \(found notes\.txt, sub/\)"):
        open_stack(tmp_path)


def test_folder_of_mixed_shapes_names_the_file(tmp_path):
    for i in (1, 2):
        write(tmp_path / f"f{i}.tif", np.zeros((4, 5), np.uint16))
    write(tmp_path / "f3.tif", np.zeros((4, 6), np.uint16))
    with pytest.raises(InputError, match=r"f3\.tif has frames of 4x6 pixels but f1\.tif has 4x5"):
        open_stack(tmp_path)


def test_folder_of_mixed_dtypes(tmp_path):
    write(tmp_path / "f1.tif", np.zeros((4, 5), np.uint16))
    write(tmp_path / "f2.tif", np.zeros((4, 5), np.float32))
    with pytest.raises(InputError, match=r"f2\.tif has pixel type float32 but f1\.tif"):
        open_stack(tmp_path)


def test_corrupt_tiff(tmp_path):
    path = tmp_path / "broken.tif"
    path.write_bytes(b"this is not a TIFF file at all" * 10)
    with pytest.raises(InputError, match=r"cannot read .*broken\.tif as a TIFF image"):
        open_stack(path)


def _cut(path, where):
    """Cut ``path`` just after the start of its second page, or at a share of its length."""
    whole = path.read_bytes()
    if where == "page1":
        with tifffile.TiffFile(path) as tif:
            end = tif.pages[1].offset + 10
    else:
        end = int(len(whole) * where)
    path.write_bytes(whole[:end])
    return path


def _stack_file(path, layout, n=20):
    data = stack_of(np.uint16, n=n, shape=(64, 64))
    kw = {"compression": "zlib"} if "zlib" in layout else {}
    if layout.startswith("imagej"):
        tifffile.imwrite(path, data, imagej=True, metadata={"axes": "TYX"}, **kw)
    else:
        write(path, data, **kw)
    return path


@pytest.mark.parametrize("where", ["page1", 0.5, 0.9])
@pytest.mark.parametrize("layout", ["plain", "imagej", "zlib", "imagej-zlib"])
def test_truncated_tiff(tmp_path, layout, where):
    path = _cut(_stack_file(tmp_path / "cut.tif", layout), where)
    with pytest.raises(InputError, match=r"cut\.tif is truncated or damaged after frame \d+ of 20"):
        read_all(path)


def test_truncated_tiff_names_the_last_whole_frame(tmp_path):
    path = _cut(_stack_file(tmp_path / "cut.tif", "zlib"), "page1")
    with pytest.raises(InputError, match=r"after frame 1 of 20"):
        read_all(path)
    # uncompressed: every frame's pixels come before the entries of page 2, which are cut
    path = _cut(_stack_file(tmp_path / "cut1.tif", "plain"), "page1")
    with pytest.raises(InputError, match=r"after frame 20 of 20 \(the file ends inside the "
                                         r"entries of page 2\)"):
        read_all(path)
    path = _stack_file(tmp_path / "cut2.tif", "imagej")
    whole = path.read_bytes()
    path.write_bytes(whole[:len(whole) - 100])  # the last frame loses its end
    with pytest.raises(InputError, match=r"after frame 19 of 20"):
        read_all(path)


def test_cut_multichannel_hyperstack_counts_frames(tmp_path):
    path = tmp_path / "hyper.tif"
    tifffile.imwrite(path, stack_of(np.uint16, n=8 * 2).reshape(8, 2, H, W), imagej=True,
                     metadata={"axes": "TCYX"}, compression="zlib")
    _cut(path, 0.5)
    with pytest.raises(InputError, match=r"after frame \d of 8"):
        read_all(path, 1)


def test_whole_files_still_read(tmp_path):
    for layout in ("plain", "imagej", "zlib", "imagej-zlib"):
        path = _stack_file(tmp_path / f"{layout}.tif", layout)
        assert read_all(path).shape == (20, 64, 64)


def test_permission_denied_says_so(tmp_path, monkeypatch):
    path = write(tmp_path / "locked.tif", stack_of(np.uint16))

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(tifffile, "TiffFile", denied)
    with pytest.raises(InputError, match=r"locked\.tif: permission denied") as info:
        open_stack(path)
    assert "uncorrupted" not in str(info.value)


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="no named pipes")
def test_named_pipe_is_refused(tmp_path):
    import os

    os.mkfifo(tmp_path / "p.tif")
    with pytest.raises(InputError, match=r"p\.tif is not a regular file"):
        open_stack(tmp_path / "p.tif")


def test_zero_size_image(tmp_path):
    path = tmp_path / "empty.tif"
    with pytest.warns(UserWarning):
        tifffile.imwrite(path, np.zeros((0, 5), np.uint16))
    with pytest.raises(InputError, match=r"empty\.tif holds a zero-size image"):
        open_stack(path)


def test_non_2d_frames_are_refused(tmp_path):
    path = tmp_path / "vol.tif"
    tifffile.imwrite(path, np.zeros((2, 3, 16, 16), np.uint16), volumetric=True, tile=(16, 16),
                     photometric="minisblack")
    with pytest.raises(InputError, match=r"cannot interpret .*vol\.tif as a stack of 2-D frames"):
        open_stack(path)


def test_input_files_are_not_modified(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    paths = [write(folder / "a.tif", stack_of(np.uint16)),
             write(folder / "b.tif", stack_of(np.uint16, seed=1), compression="zlib")]
    hyper = tmp_path / "h.tif"
    tifffile.imwrite(hyper, stack_of(np.uint8, n=4).reshape(2, 2, H, W), imagej=True,
                     metadata={"axes": "TCYX"})
    paths.append(hyper)

    def digest():
        return [(hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns) for p in paths]

    before = digest()
    for path, channel in ((folder, None), (hyper, 1)):
        with open_stack(path, channel) as src:
            frames = src.read(0, src.n_frames)
            frames += 1  # returned arrays are copies, never views of the files
    assert digest() == before


def test_whole_file_check_runs_once_per_file_version(tmp_path, monkeypatch):
    """Every reader of a run reopens the file (a thread per GPU): the page walk is not
    repeated for an unchanged file, and is for a changed one."""
    import os

    from xcorr_app.io import _tiff

    calls = []
    real = _tiff.check_whole
    monkeypatch.setattr(_tiff, "check_whole",
                        lambda tif, path: calls.append(path) or real(tif, path))
    path = tmp_path / "s.tif"
    tifffile.imwrite(path, np.ones((3, 8, 9), np.uint16), photometric="minisblack")
    for _ in range(3):
        open_stack(path).close()
    assert len(calls) == 1
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a new version of the file
    open_stack(path).close()
    assert len(calls) == 2


def test_source_names_of_an_array_and_a_stashed_source_are_one_list():
    from xcorr_app.io import ArraySource
    from xcorr_app.streaming import StashedSource

    src = ArraySource(np.zeros((5, 4, 6), np.uint16), name="movie")
    assert src.source_names() == ["movie"] * 5 == [src.source_name(i) for i in range(5)]
    assert StashedSource(src, None).source_names() == ["movie"] * 5

    class Named:  # a source without source_names: one call a frame
        n_frames, frame_shape, dtype, notes, paths = 3, (4, 6), np.dtype(np.uint16), [], []

        def source_name(self, i):
            return f"f{i}"

    assert StashedSource(Named(), None).source_names() == ["f0", "f1", "f2"]


def test_a_range_kept_on_the_device_serves_its_frames_only():
    """One GPU's range of a ``gpus`` run (frames 4:8 of 10) kept in a stash: a window inside it
    is filled by the first pass and read from there once complete; a window reaching outside
    it reads the source (NumPy arrays stand in for the device)."""
    from xcorr_app.io import ArraySource, FrameRange
    from xcorr_app.streaming import DeviceStash, StashedSource

    stack = np.arange(10, dtype=np.float32)[:, None, None] * np.ones((10, 2, 3), np.float32)
    stash = DeviceStash(np.full((4, 2, 3), -1, np.float32), first=4, n=10)
    src = StashedSource(ArraySource(stack), stash)
    assert src.stack is stack  # (never the whole stack: the source's)
    part = FrameRange(src, 4, 8)
    assert part.stack is not None and part.stash is not None and not part.stash.complete
    part.stash.rows(0, 4)[...] = stack[4:8]  # the first pass's copies
    part.stash.mark(0, 4)
    again = FrameRange(src, 5, 8)
    assert again.stash.complete and again.stack.base is stash.base
    np.testing.assert_array_equal(again.stack, stack[5:8])
    outside = FrameRange(src, 2, 6)
    assert outside.stash is None and outside.stack[0, 0, 0] == 2
    assert FrameRange(src, 8, 10).stash is None
