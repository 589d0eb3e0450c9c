"""``align(out=)``: the aligned stack made by the run (warped during the last patch pass, or
applied from the stack kept on the GPU), the frames of ``AlignResult.apply`` with its
defaults; and the stack kept on the GPU between passes (``streaming/_stash.py``)."""

import numpy as np
import pytest

from xcorr_app import align
from xcorr_app.bench._align_data import nonrigid_stack
from xcorr_app.errors import InputError

from synthetic import write_stack

KW = dict(max_shift=14, verify=False, prefilter="gaussian:1", lucas_kanade="off",
          boundary="linear")


@pytest.fixture(scope="module")
def deformed():
    return nonrigid_stack(np.random.default_rng(5), 7, (96, 112), 10.0, 3.0, 400.0,
                          "camera")[0]


def applied(res, stack, device="cpu"):
    return np.concatenate([c for _, c in res.apply(stack, device=device)])


@pytest.mark.parametrize("patches", [None, (3, 2)])
@pytest.mark.parametrize("passes", [0, 1])
def test_out_holds_the_frames_apply_gives(deformed, patches, passes):
    if patches is None and passes:
        pytest.skip("template passes are a patch option")
    extra = {} if patches is None else dict(patches=patches, patch_template_passes=passes)
    out = np.full(deformed.shape, np.nan, np.float32)  # poisoned
    res = align(deformed, device="cpu", chunk_frames=3, out=out, **KW, **extra)
    plain = align(deformed, device="cpu", chunk_frames=3, **KW, **extra)
    np.testing.assert_array_equal(res.shifts, plain.shifts)
    if patches is not None:
        np.testing.assert_array_equal(res.motion_field, plain.motion_field)
    np.testing.assert_array_equal(out, applied(plain, deformed))
    assert np.isfinite(out).all()


@pytest.mark.parametrize("patches", [None, (2, 2)])
def test_a_callable_out_gets_every_chunk_in_order(deformed, tmp_path, patches):
    path = write_stack(tmp_path / "s.tif", deformed)
    got = []
    extra = {} if patches is None else dict(patches=patches)
    res = align(path, device="cpu", chunk_frames=2, out=lambda a, c: got.append((a, c.copy())),
                **KW, **extra)
    assert [a for a, _ in got] == [0, 2, 4, 6]
    assert all(c.dtype == np.float32 for _, c in got)
    np.testing.assert_array_equal(np.concatenate([c for _, c in got]), applied(res, deformed))


class Sink:
    """A callable out that states the type it stores (``align(out=)``'s ``dtype``)."""

    def __init__(self, dtype):
        self.dtype, self.got = dtype, []

    def __call__(self, start, chunk):
        self.got.append((start, chunk.copy()))

    def frames(self):
        assert [a for a, _ in self.got] == sorted(a for a, _ in self.got)
        return np.concatenate([c for _, c in self.got])


@pytest.mark.parametrize("patches", [None, (2, 2)])
def test_a_callable_out_with_a_dtype_gets_the_frames_rounded(deformed, patches):
    from xcorr_app.io import as_dtype

    extra = {} if patches is None else dict(patches=patches)
    sink = Sink(np.dtype(np.int16))
    res = align(deformed, device="cpu", chunk_frames=3, out=sink, **KW, **extra)
    got = sink.frames()
    assert got.dtype == np.int16 and len(got) == len(deformed)
    np.testing.assert_array_equal(got, as_dtype(applied(res, deformed), np.int16))


@pytest.mark.parametrize("dtype", ["complex64", "bool", "no type"])
def test_a_callable_out_of_another_type_is_an_input_error(deformed, dtype):
    with pytest.raises(InputError, match="float32 or an integer type"):
        align(deformed, device="cpu", out=Sink(dtype), **KW)


def test_a_callable_out_of_a_float_type_gets_float32_chunks(deformed):
    sink = Sink(np.dtype(np.float64))  # (it casts them itself, as a float64 writer does)
    align(deformed, device="cpu", chunk_frames=3, out=sink, **KW)
    assert {c.dtype for _, c in sink.got} == {np.dtype(np.float32)}


@pytest.mark.parametrize("out", [np.zeros((7, 96, 112)), np.zeros((6, 96, 112), np.float32),
                                 np.zeros((7, 112, 96), np.float32), "frames.tif",
                                 np.zeros((7, 96, 224), np.float32)[:, :, ::2]])
def test_a_bad_out_is_an_input_error_before_any_pass(deformed, out, monkeypatch):
    import xcorr_app.alignment._run as run

    monkeypatch.setattr(run, "measure_passes", None)  # (a pass would fail otherwise)
    monkeypatch.setattr(run, "measure_frames", None)
    with pytest.raises(InputError, match="out must be a writeable C-contiguous float32"):
        align(deformed, device="cpu", out=out, **KW)


def test_a_read_only_out_is_an_input_error(deformed):
    out = np.zeros(deformed.shape, np.float32)
    out.flags.writeable = False
    with pytest.raises(InputError, match="out must be"):
        align(deformed, device="cpu", out=out, **KW)


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("part", ["whole", "frames 2-6"])
def test_an_out_that_is_the_stack_is_an_input_error_and_the_stack_is_kept(deformed, device,
                                                                          part):
    """align(s, out=s) overwrote the caller's input, and the quality report then read the
    aligned frames as the input (every frame flagged poor): refused before a frame is read."""
    if device == "gpu":
        import cupy as xp
    else:
        xp = np
    stack = xp.asarray(deformed.astype(np.float32))
    before = stack.copy()
    out = stack if part == "whole" else xp.zeros((9, 96, 112), np.float32)
    if part != "whole":  # (the stack frames 2-8 of a buffer, out its frames 0-6)
        out[2:2 + len(stack)] = stack
        stack, out = out[2:2 + len(before)], out[:len(before)]
    with pytest.raises(InputError, match="out is .* the stack being aligned"):
        align(stack, device=device, out=out, **KW)
    assert bool((stack == before).all())


# ------------------------------------------------------------------ the stash, on the host

def test_a_stash_window_marks_its_frames_of_the_whole():
    from xcorr_app.streaming import DeviceStash

    whole = DeviceStash(np.zeros((6, 2, 2), np.uint16))
    part = whole.window(2, 5)
    assert part.frames.shape == (3, 2, 2) and not part.complete
    part.rows(0, 3)[:] = 7
    part.mark(0, 3)
    assert part.complete and not whole.complete
    assert whole.filled.tolist() == [False, False, True, True, True, False]
    assert (whole.base[2:5] == 7).all() and (whole.base[[0, 1, 5]] == 0).all()


def test_a_frame_range_of_a_stashed_source_windows_its_stash():
    from xcorr_app.io import ArraySource, FrameRange
    from xcorr_app.streaming import DeviceStash, StashedSource

    stack = np.arange(5 * 2 * 2, dtype=np.uint16).reshape(5, 2, 2)
    stash = DeviceStash(np.zeros_like(stack))
    src = StashedSource(ArraySource(stack), stash)
    part = FrameRange(src, 1, 4)
    assert part.stash.offset == 1 and part.stash.n == 3
    np.testing.assert_array_equal(src.read(1, 3), stack[1:3])  # reads: from the source
    assert src.stack is stack  # not complete: the source's own
    stash.base[:] = stack
    stash.mark(0, 5)
    assert src.stack is stash.base or np.shares_memory(src.stack, stash.base)
    assert StashedSource(ArraySource(stack), None).stack is stack


# ------------------------------------------------------------------------------------ GPU

@pytest.mark.gpu
def test_the_stash_fills_once_and_later_loops_read_it():
    """The first GPU chunk loop over a stashed source uploads into the stash (poisoned first);
    once complete, a loop over a range of it reads the device array directly."""
    import cupy as cp

    from xcorr_app.io import ArraySource, FrameRange
    from xcorr_app.streaming import DeviceChunks, DeviceStash, StashedSource

    stack = np.random.default_rng(3).integers(0, 60000, (37, 19, 23)).astype(np.uint16)
    stash = DeviceStash.allocate(*stack.shape[:1], stack.shape[1:], stack.dtype)
    stash.base.fill(12345)
    src = StashedSource(ArraySource(stack), stash)
    with DeviceChunks(FrameRange(src, 0, 37), 5, cp) as chunks:
        seen = [(a, f.copy()) for a, f in chunks]
    assert stash.complete
    np.testing.assert_array_equal(stash.base.get(), stack)
    np.testing.assert_array_equal(np.concatenate([f.get() for _, f in seen]), stack)
    part = FrameRange(src, 3, 30)
    assert cp.shares_memory(part.stack, stash.base)
    with DeviceChunks(part, 8, cp, streams=True) as chunks:  # two streams, as uploaded ones
        again, streams = [], set()
        for _, f in chunks:
            streams.add(cp.cuda.get_current_stream().ptr)
            again.append(f.get())
    np.testing.assert_array_equal(np.concatenate(again), stack[3:30])
    assert len(streams) == 2 and cp.cuda.Stream.null.ptr not in streams


@pytest.mark.gpu
@pytest.mark.parametrize("patches", [None, (3, 2)])
def test_gpu_out_holds_the_frames_apply_gives(deformed, tmp_path, patches):
    """Host stack (kept on the GPU for the later passes) and file: NumPy out, CuPy out and a
    callable, against ``apply`` of a run without out (the same run up to the GPU's 1e-4 px)."""
    import cupy as cp

    path = write_stack(tmp_path / "s.tif", deformed)
    extra = {} if patches is None else dict(patches=patches)
    for stack in (deformed, path):
        out = np.full(deformed.shape, np.nan, np.float32)
        res = align(stack, device="gpu", chunk_frames=3, out=out, **KW, **extra)
        assert res.settings["device"] == "gpu"
        want = applied(res, deformed, device="gpu")
        np.testing.assert_allclose(out, want, rtol=0, atol=1e-5 * float(deformed.max()))
        plain = align(stack, device="gpu", chunk_frames=3, max_memory="4G", **KW, **extra)
        np.testing.assert_allclose(res.shifts, plain.shifts, rtol=0, atol=1e-4)
        if patches is not None:
            np.testing.assert_allclose(res.motion_field, plain.motion_field, rtol=0, atol=1e-3)
    gout = cp.full(deformed.shape, cp.nan, cp.float32)
    res = align(cp.asarray(deformed), device="gpu", chunk_frames=3, out=gout, **KW, **extra)
    np.testing.assert_allclose(gout.get(), applied(res, deformed, device="gpu"), rtol=0,
                               atol=1e-5 * float(deformed.max()))
    got = []
    align(deformed, device="gpu", chunk_frames=4, out=lambda a, c: got.append(a), **KW, **extra)
    assert got == [0, 4]


@pytest.mark.gpu
@pytest.mark.parametrize("patches", [None, (3, 2)])
def test_gpu_callable_out_in_pieces_and_in_its_dtype(deformed, patches, monkeypatch):
    """From the stack kept on the GPU a callable is handed each chunk in pieces (two frames'
    bytes here: 3-frame chunks as 2 + 1), in frame order, rounded on the device into its
    ``dtype`` bit for bit as ``as_dtype`` rounds the float32 frames."""
    from xcorr_app.alignment import _aligned_out
    from xcorr_app.io import as_dtype

    monkeypatch.setattr(_aligned_out, "PIECE_BYTES", 2 * 96 * 112 * 4)
    extra = {} if patches is None else dict(patches=patches)
    floats, rounded = Sink(np.float32), Sink(np.uint16)
    res = align(deformed, device="gpu", chunk_frames=3, out=floats, **KW, **extra)
    if patches is None:
        assert [a for a, _ in floats.got] == [0, 2, 3, 5, 6]
    got = floats.frames()
    assert got.dtype == np.float32 and got.shape == deformed.shape
    np.testing.assert_allclose(got, applied(res, deformed, device="gpu"), rtol=0,
                               atol=1e-5 * float(deformed.max()))
    if patches is None:  # (the field's warp: the same float32 frames; the shifts' are bits)
        np.testing.assert_array_equal(got, applied(res, deformed, device="gpu"))
    # (another run: the GPU's shifts of a run differ from the last one's by ~1e-5 px)
    again = align(deformed, device="gpu", chunk_frames=3, out=rounded, **KW, **extra)
    got = rounded.frames()
    assert got.dtype == np.uint16 and got.shape == deformed.shape
    if patches is None:
        np.testing.assert_array_equal(got, as_dtype(applied(again, deformed, device="gpu"),
                                                    np.uint16))
    else:  # the field warped on the device, then rounded there as on the host
        diff = got.astype(np.int64) - as_dtype(applied(again, deformed, device="gpu"),
                                               np.uint16)
        assert np.abs(diff).max() <= 1 and (diff != 0).mean() < 1e-3


class DeviceSink(Sink):
    """A callable out that ``takes_device``: handed the CuPy chunks themselves."""

    takes_device = True

    def __call__(self, start, chunk):
        assert type(chunk).__module__.startswith("cupy")
        self.got.append((start, chunk.get()))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.uint16])
def test_gpu_callable_out_that_takes_device_gets_whole_chunks(deformed, dtype):
    """A callable that ``takes_device`` (the command line's writer thread) is handed each chunk
    whole, as a CuPy array, holding the frames of ``apply`` in its type (rounded on the
    device bit for bit as ``as_dtype`` rounds them)."""
    from xcorr_app.io import as_dtype

    sink = DeviceSink(dtype)
    res = align(deformed, device="gpu", chunk_frames=3, out=sink, **KW)
    assert [a for a, _ in sink.got] == [0, 3, 6]
    assert [len(c) for _, c in sink.got] == [3, 3, len(deformed) - 6]
    got = sink.frames()
    assert got.dtype == dtype and got.shape == deformed.shape
    np.testing.assert_array_equal(got, as_dtype(applied(res, deformed, device="gpu"), dtype))


@pytest.mark.parametrize("extra", [dict(min_confidence=50.0, interpolate_low=True),
                                   dict(reference="refined", lucas_kanade="on"),
                                   dict(reference="previous"),
                                   dict(patches=(2, 2), patch_template_passes=2)])
def test_out_after_shifts_changed_at_the_end(deformed, extra):
    """Shifts changed after the pass that measured them (interpolated, Lucas-Kanade), frame to
    frame references and two template passes: out holds the frames of the final result."""
    kw = dict(KW, **extra)
    out = np.full(deformed.shape, np.nan, np.float32)
    res = align(deformed, device="cpu", chunk_frames=3, out=out, **kw)
    np.testing.assert_array_equal(out, applied(res, deformed))


@pytest.mark.parametrize("patches", [None, (2, 2)])
def test_an_error_in_a_callable_out_ends_the_run(deformed, patches):
    def out(start, chunk):
        if start >= 3:
            raise RuntimeError("disk full")

    extra = {} if patches is None else dict(patches=patches)
    with pytest.raises(RuntimeError, match="disk full"):
        align(deformed, device="cpu", chunk_frames=3, out=out, **KW, **extra)


def test_a_lazy_stack_is_not_read_to_check_out_apart(deformed):
    """np.may_share_memory would read a stack that converts itself (h5py, Zarr, Dask) whole."""
    from xcorr_app.alignment._aligned_out import check_apart

    class Lazy:
        shape, dtype = deformed.shape, deformed.dtype

        def __array__(self, *args, **kwargs):
            raise AssertionError("read whole to check out apart")

    check_apart(np.zeros(deformed.shape, np.float32), Lazy())


@pytest.mark.gpu
def test_gpu_rigid_report_fills_out_as_it_reads(deformed, monkeypatch):
    """A rigid run of a CuPy stack into a CuPy ``out`` with the quality report: the report's
    pass shifts the frames once for its figures and the output (no warp of the output's
    own), and ``out`` is bit for bit ``apply``'s, as without the report; the report is
    the one the run gives where its pass fills no ``out`` (its shift's taps weighed once a
    frame: to float32 rounding)."""
    import cupy as cp

    from xcorr_app.alignment._executors import InProcess

    stack = cp.asarray(deformed)
    off = cp.full(deformed.shape, cp.nan, cp.float32)
    plain = align(stack, device="gpu", chunk_frames=3, out=off, quality=False, **KW)
    apart = align(stack, device="gpu", chunk_frames=3, **KW).quality

    def refused(*args):
        raise AssertionError("the output warped apart from the report's pass")

    monkeypatch.setattr(InProcess, "fill_out", refused)
    on = cp.full(deformed.shape, cp.nan, cp.float32)
    res = align(stack, device="gpu", chunk_frames=3, out=on, **KW)
    # (the shifts of a run with the report and one without: the same to the GPU's 1e-4 px,
    # the passes' memory plans differ; each output is its run's shifts applied, bit for bit)
    np.testing.assert_allclose(res.shifts, plain.shifts, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(on.get(), applied(res, deformed, device="gpu"))
    np.testing.assert_array_equal(off.get(), applied(plain, deformed, device="gpu"))
    q = res.quality
    for k in ("before", "after", "residual", "residual_rotation_deg"):
        np.testing.assert_allclose(getattr(q, k), getattr(apart, k), rtol=1e-4, atol=1e-4)
    for k in ("worse", "poor", "rotated"):
        np.testing.assert_array_equal(getattr(q, k), getattr(apart, k))
    assert q.area == apart.area
    np.testing.assert_allclose([q.sharpness_before, q.sharpness_after],
                               [apart.sharpness_before, apart.sharpness_after], rtol=1e-6)


@pytest.mark.gpu
def test_gpu_rigid_report_leaves_out_to_its_warp_where_it_reads_other_frames(monkeypatch):
    """Where the report reads frames the output is not made of (a static pattern taken from
    what it reads), the output is warped apart, from the frames as they are."""
    import cupy as cp

    from xcorr_app.alignment._executors import InProcess

    rng = np.random.default_rng(3)
    stack = nonrigid_stack(rng, 9, (96, 112), 10.0, 0.0, 400.0, "camera")[0]
    hot = (rng.random(stack.shape[1:]) < 0.004) * 5.0 * stack.max()  # hot pixels
    stack = (stack + hot).astype(np.float32)
    seen, asked = [], InProcess.out_in_report

    def recorded(self, out):
        seen.append(asked(self, out))
        return seen[-1]

    monkeypatch.setattr(InProcess, "out_in_report", recorded)
    out = cp.full(stack.shape, cp.nan, cp.float32)
    res = align(cp.asarray(stack), device="gpu", out=out, static="on", **KW)
    assert res.settings["static"]["removed"] and seen == [False]
    np.testing.assert_array_equal(out.get(), applied(res, stack, device="gpu"))
