"""streaming.RegisteredFile: a file's frames copied to the GPU straight from its cached pages
(a read-only memory map registered with CUDA), where it applies, and the reads as before
elsewhere."""

import sys
from pathlib import Path

import numpy as np
import pytest
import tifffile

from xcorr_app import backend
from xcorr_app.alignment.volume import open_volumes
from xcorr_app.io import ArraySource
from xcorr_app.streaming import DeviceChunks
from xcorr_app.streaming import _registered
from xcorr_app.streaming._registered import RegisteredFile

sys.path.insert(0, str(Path(__file__).parents[1] / "alignment" / "volume"))  # volume_samples


def volumes_file(tmp_path, rng, dtype=np.uint16, shape=(7, 5, 33, 47)):
    stack = rng.integers(0, 60000, shape).astype(dtype)
    tifffile.imwrite(tmp_path / "v.tif", stack)
    return stack, open_volumes(tmp_path / "v.tif").frames()


def registered_file(tmp_path, rng, monkeypatch):
    """A volumes file and its :class:`RegisteredFile` (with a GPU, as far as it asks)."""
    stack, items = volumes_file(tmp_path, rng)
    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    return stack, RegisteredFile.open(items)


@pytest.fixture
def fake_cuda(monkeypatch):
    """A CuPy whose host registration records its calls (no GPU needed)."""
    import sys
    import types

    calls = []

    class Device:  # (the current device: 0; a context, as CuPy's)
        def __init__(self, id=0):
            self.id = id

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    runtime = types.SimpleNamespace(
        hostRegister=lambda p, n, flags: calls.append(("register", p, n, flags)),
        hostUnregister=lambda p: calls.append(("unregister", p)),
        memcpyHostToDevice=1,
        memcpyAsync=lambda dst, src, n, kind, stream: calls.append(("copy", dst, src, n, kind,
                                                                     stream)))
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(
        cuda=types.SimpleNamespace(runtime=runtime, Device=Device)))
    return calls


def test_the_files_frames_are_mapped_read_only_and_registered_a_run_at_a_time(
        tmp_path, rng, monkeypatch, fake_cuda):
    """The first frame's pages at open, each pin the pages after those up to its frame, whole
    pages, contiguous, none twice; a release the runs that end before its frame; close the
    rest, once."""
    import mmap

    stack, registered = registered_file(tmp_path, rng, monkeypatch)
    np.testing.assert_array_equal(registered.array, stack)  # (the frames where the file has them)
    assert not registered.array.flags.writeable
    (what, first, length, flags), = fake_cuda
    assert what == "register" and flags == 8  # (read-only)
    frame0 = registered.array.ctypes.data
    assert first % mmap.PAGESIZE == 0 and first + length >= frame0 + stack[0].nbytes
    assert registered.pin(4) and registered.pin(3) and registered.pin(7)
    runs = [(p, n) for what, p, n, _ in fake_cuda]
    assert len(runs) == 3 and all(p % mmap.PAGESIZE == 0 for p, _ in runs)
    assert [p for p, _ in runs[1:]] == [p + n for p, n in runs[:-1]]  # (contiguous)
    assert runs[1][0] + runs[1][1] >= frame0 + 4 * stack[0].nbytes
    assert runs[2][0] + runs[2][1] == registered._pointer + registered._length
    registered.release(4)  # (frames 0-3 copied: the run up to frame 4 may hold frame 4's start)
    assert fake_cuda[3:] == [("unregister", first)]
    registered.close()
    registered.close()  # (once)
    assert fake_cuda[4:] == [("unregister", runs[1][0]), ("unregister", runs[2][0])]
    assert registered.array is None


def test_releases_ahead_run_in_the_pinning_thread_in_order(tmp_path, rng, monkeypatch,
                                                             fake_cuda):
    """release_ahead unregisters in pin_ahead's thread, after the pins queued before it, what
    release would; the run's thread does not wait for it."""
    import threading

    stack, registered = registered_file(tmp_path, rng, monkeypatch)
    threads = []
    runtime = sys.modules["cupy"].cuda.runtime
    unregister = runtime.hostUnregister
    monkeypatch.setattr(runtime, "hostUnregister", lambda p: threads.append(
        threading.current_thread().name) or unregister(p))
    first = fake_cuda[0][1]
    registered.pin_ahead(4)
    registered.release_ahead(4)
    registered.pin_ahead(7)
    registered._thread().submit(lambda: None).result()
    assert [c[0] for c in fake_cuda] == ["register", "register", "unregister", "register"]
    assert fake_cuda[2] == ("unregister", first) and len(registered._pieces) == 2
    assert threads and all(t.startswith("xcorr-register") for t in threads)
    registered.close()
    assert [c[0] for c in fake_cuda[4:]] == ["unregister", "unregister"]


def test_a_chunks_copy_is_cut_where_a_registered_run_ends(tmp_path, rng, monkeypatch,
                                                           fake_cuda):
    """CUDA refuses a copy that spans two registrations: frames 1-5 after pin(4) are copied as
    the parts in the first frame's run, in pin(4)'s and in the run the upload registers for
    the frames after, back to back."""
    import types

    stack, registered = registered_file(tmp_path, rng, monkeypatch)
    registered.pin(4)
    out = types.SimpleNamespace(data=types.SimpleNamespace(ptr=10**6))
    registered.upload(out, 1, 6, types.SimpleNamespace(ptr=77))
    runs = [(c[1], c[1] + c[2]) for c in fake_cuda if c[0] == "register"]
    copies = [c[1:] for c in fake_cuda if c[0] == "copy"]
    assert len(runs) == 3 and len(copies) == 3
    assert all(c[3:] == (1, 77) for c in copies)  # (host to device, on the stream)
    assert copies[0][:2] == (10**6, registered.array[1].ctypes.data)
    for (dst, src, n, *_), (dst2, src2, *_) in zip(copies, copies[1:]):  # (back to back)
        assert (dst + n, src + n) == (dst2, src2)
    assert sum(c[2] for c in copies) == 5 * stack[0].nbytes
    for _, src, n, *_ in copies:  # (each within one run)
        assert any(a <= src and src + n <= b for a, b in runs)
    registered.close()


def test_pages_registered_ahead_in_a_thread_are_waited_for(tmp_path, rng, monkeypatch,
                                                            fake_cuda):
    """pin_ahead registers in a thread of its own; the next upload copies only after it."""
    import sys
    import threading
    import time
    import types

    _, registered = registered_file(tmp_path, rng, monkeypatch)
    runtime = sys.modules["cupy"].cuda.runtime
    plain = runtime.hostRegister

    def slow(p, n, flags):
        time.sleep(0.2)
        plain(p, n, flags)
        fake_cuda.append(("by", threading.current_thread().name))

    monkeypatch.setattr(runtime, "hostRegister", slow)
    registered.pin_ahead(5)
    out = types.SimpleNamespace(data=types.SimpleNamespace(ptr=0))
    registered.upload(out, 1, 5, types.SimpleNamespace(ptr=0))
    what = [c[0] for c in fake_cuda]
    assert what[:3] == ["register", "register", "by"] and set(what[3:]) == {"copy"}
    assert fake_cuda[2][1].startswith("xcorr-register")
    registered.close()
    assert registered._worker is None and [c[0] for c in fake_cuda].count("unregister") == 2


def test_a_run_is_kept_while_its_last_page_holds_frames_not_copied(tmp_path, rng, monkeypatch,
                                                                    fake_cuda):
    """Frames smaller than a page: the run up to frame 2 ends in a page that holds frames 2 and
    3 as well, so release(2) (frames 0 and 1 copied) keeps it; release(4) lets it go."""
    import mmap

    stack = rng.integers(0, 255, (96, 8, 16)).astype(np.uint8)  # (128 bytes a frame)
    tifffile.imwrite(tmp_path / "s.tif", stack)
    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    from xcorr_app.io import open_stack

    with open_stack(tmp_path / "s.tif") as src:
        registered = RegisteredFile.open(src)
        registered.pin(2)
        end = registered._pieces[-1][1]
        assert end % mmap.PAGESIZE == 0 and end > registered.array[3].ctypes.data + 128
        registered.release(2)
        assert not [c for c in fake_cuda if c[0] == "unregister"]
        last = [a for a, b in registered._pieces if b <= registered.array[40].ctypes.data]
        registered.release(40)
        assert [c[1] for c in fake_cuda if c[0] == "unregister"] == last
        registered.close()


def test_a_refused_later_run_leaves_its_frames_to_ordinary_copies(tmp_path, rng, monkeypatch,
                                                                   fake_cuda):
    import sys

    _, registered = registered_file(tmp_path, rng, monkeypatch)

    def refuse(*args):
        raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered")

    monkeypatch.setattr(sys.modules["cupy"].cuda.runtime, "hostRegister", refuse)
    assert not registered.pin(5) and len(registered._pieces) == 1
    registered.close()
    assert [c[0] for c in fake_cuda] == ["register", "unregister"]


@pytest.mark.parametrize("case", ["no file", "no gpu", "too large", "big-endian"])
def test_it_applies_only_to_a_native_file_that_fits_with_a_gpu(tmp_path, rng, monkeypatch,
                                                                fake_cuda, case):
    stack, items = volumes_file(tmp_path, rng)
    monkeypatch.setattr(backend, "gpu_available", lambda: case != "no gpu")
    if case == "no file":
        items = ArraySource(stack[:, 0])
    if case == "too large":  # (a quarter of what is available: less than the file)
        monkeypatch.setattr(backend, "host_available_bytes", lambda: 4 * stack.nbytes - 4)
    if case == "big-endian":
        np.save(tmp_path / "be.npy", stack.astype(">u2"))
        items = open_volumes(tmp_path / "be.npy").frames()
        assert items.stored is None
    assert RegisteredFile.open(items) is None and fake_cuda == []


def test_a_failed_registration_reads_as_before(tmp_path, rng, monkeypatch, fake_cuda):
    import sys

    def refuse(*args):
        raise RuntimeError("cudaErrorNotSupported")

    monkeypatch.setattr(sys.modules["cupy"].cuda.runtime, "hostRegister", refuse)
    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    _, items = volumes_file(tmp_path, rng)
    assert RegisteredFile.open(items) is None


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["volumes", "frames"])
def test_chunks_come_from_the_registered_file_and_it_is_released(tmp_path, rng, kind):
    import cupy

    from xcorr_app.io import open_stack

    stack, items = volumes_file(tmp_path, rng)
    if kind == "frames":  # (a 2-D TIFF stack)
        stack = stack[:, 0]
        tifffile.imwrite(tmp_path / "s.tif", stack)
        items = open_stack(tmp_path / "s.tif")
    chunks = DeviceChunks(items, 3, cupy)
    registered = chunks._mapped
    assert registered is not None and chunks._prefetch is None
    starts, held = [], []
    first_run = registered._pieces[0]
    with chunks:
        for start, frames in chunks:
            np.testing.assert_array_equal(frames.get(), stack[start:start + len(frames)])
            starts.append(start)
            registered._thread().submit(lambda: None).result()  # (its pins and releases done)
            held.append(list(registered._pieces))
    assert starts == [0, 3, 6] and chunks._mapped is None and registered._mm is None
    if kind == "volumes":  # (frames of several pages: a run for each pin)
        # the first frame's run (from the open), chunk 0's and chunk 1's (registered before
        # chunk 0 is handed out), chunk 2's (by the thread); the first frame's run let go (by
        # the thread) once chunk 0 was copied
        assert held[0][0] == first_run and len(held[0]) == 4
        assert first_run not in held[1] and len(held[1]) == 3 and held[2] == held[1]
    if kind == "frames":
        items.close()
    with pytest.raises(cupy.cuda.runtime.CUDARuntimeError):  # (no longer registered)
        cupy.cuda.runtime.hostUnregister(registered._pointer)


@pytest.mark.gpu
def test_volumes_from_the_registered_file_give_the_arrays_shifts(tmp_path):
    from xcorr_app.alignment import align_volumes

    from volume_samples import random_shifts, shifted_stack, volume

    stack = shifted_stack(volume(depth=12, size=40), random_shifts(6, seed=4), photons=1e3)
    stack = np.round(stack).astype(np.uint16)
    tifffile.imwrite(tmp_path / "v.tif", stack)
    got = align_volumes(tmp_path / "v.tif", device="gpu")
    want = align_volumes(stack, device="gpu")
    np.testing.assert_array_equal(got.shifts, want.shifts)
    np.testing.assert_array_equal(got.peak, want.peak)


def test_a_tiff_stack_says_where_its_frames_lie(tmp_path, rng, monkeypatch, fake_cuda):
    """A contiguous TIFF of frames is registered whole (its frames equal the file's); a channel
    of a hyperstack, a folder of files and a compressed file are read as before."""
    from xcorr_app.io import open_stack

    stack = rng.integers(0, 60000, (9, 31, 45)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "s.tif", stack)
    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    with open_stack(tmp_path / "s.tif") as src:
        registered = RegisteredFile.open(src)
        np.testing.assert_array_equal(registered.array, stack)
        registered.close()
    (tmp_path / "folder").mkdir()
    for k in range(2):
        tifffile.imwrite(tmp_path / "folder" / f"f{k}.tif", stack[k])
    tifffile.imwrite(tmp_path / "zip.tif", stack, compression="zlib")
    tifffile.imwrite(tmp_path / "tc.tif", rng.integers(0, 9, (4, 2, 31, 45)).astype(np.uint16),
                     imagej=True, metadata={"axes": "TCYX"})
    for path, channel in ((tmp_path / "folder", None), (tmp_path / "zip.tif", None),
                          (tmp_path / "tc.tif", 1)):
        with open_stack(path, channel=channel) as src:
            assert src.stored is None and RegisteredFile.open(src) is None


def test_a_file_not_in_the_page_cache_is_read_as_before(tmp_path, rng, monkeypatch, fake_cuda):
    """Registering would read it whole from the disk before the first chunk."""
    _, items = volumes_file(tmp_path, rng)
    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    shares = []
    monkeypatch.setattr(_registered, "_cached_share",
                        lambda pointer, length: shares.append(length) or 0.5)
    assert RegisteredFile.open(items) is None and fake_cuda == [] and shares


def test_a_file_just_written_is_in_the_page_cache(tmp_path, rng):
    import mmap

    stack, _ = volumes_file(tmp_path, rng)
    with open(tmp_path / "v.tif", "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    whole = np.frombuffer(mm, np.uint8)
    assert _registered._cached_share(whole.ctypes.data, len(whole)) >= _registered.CACHED_SHARE
    assert _registered._cached_share(0, 4096) == 0.0  # (not a mapping: mincore refuses)
    del whole
    mm.close()


def test_a_frame_range_says_where_its_frames_lie(tmp_path, rng, monkeypatch, fake_cuda):
    """A range of a contiguous TIFF (as the rigid and patch passes read one) is registered
    from its own first frame on; a range of a source with no file stored has none."""
    from xcorr_app.io import FrameRange, open_stack

    stack = rng.integers(0, 60000, (9, 31, 45)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "s.tif", stack)
    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    with open_stack(tmp_path / "s.tif") as src:
        path, offset = FrameRange(src, 2, 7).stored
        assert (path, offset) == (src.stored[0], src.stored[1] + 2 * 31 * 45 * 2)
        registered = RegisteredFile.open(FrameRange(src, 2, 7))
        np.testing.assert_array_equal(registered.array, stack[2:7])
        registered.close()
    assert FrameRange(ArraySource(stack), 2, 7).stored is None


def test_a_range_at_the_end_maps_and_registers_only_its_own_frames(tmp_path, rng, monkeypatch,
                                                                    fake_cuda):
    """The frames of a file before a range (another GPU's) are neither mapped nor page-locked:
    the first registration holds the range's first frame, within a page either side."""
    import mmap

    from xcorr_app.io import FrameRange, open_stack

    stack = rng.integers(0, 60000, (64, 256, 256)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "s.tif", stack)
    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    with open_stack(tmp_path / "s.tif") as src:
        registered = RegisteredFile.open(FrameRange(src, 60, 64))
        (what, start, length, _), = fake_cuda
        assert length <= stack[0].nbytes + 2 * mmap.PAGESIZE
        assert registered._length <= 4 * stack[0].nbytes + mmap.ALLOCATIONGRANULARITY
        np.testing.assert_array_equal(registered.array, stack[60:])
        registered.close()


@pytest.mark.gpu
def test_the_stash_is_filled_from_the_registered_file(tmp_path, rng):
    """A range of a cached TIFF whose stack is kept on the GPU: its chunks are copied out of
    the file's pages into the stash's rows, which then hold the frames, complete; a later pass
    reads them there."""
    import cupy

    from xcorr_app.io import FrameRange, open_stack
    from xcorr_app.streaming import StashedSource, keep_on_gpu

    stack = rng.integers(0, 60000, (11, 31, 45)).astype(np.uint16)
    tifffile.imwrite(tmp_path / "s.tif", stack)
    with open_stack(tmp_path / "s.tif") as plain:
        src = StashedSource(plain, keep_on_gpu(plain, cupy))
        part = FrameRange(src, 2, 9)
        chunks = DeviceChunks(part, 3, cupy)
        assert chunks._mapped is not None and chunks._prefetch is None
        with chunks:
            for start, frames in chunks:
                want = stack[2 + start:2 + start + len(frames)]
                np.testing.assert_array_equal(frames.get(), want)
        assert part.stash.complete and not src.stash.complete
        np.testing.assert_array_equal(part.stash.frames.get(), stack[2:9])
        again = FrameRange(src, 2, 9)
        assert again.stack is not None and DeviceChunks(again, 3, cupy)._direct
