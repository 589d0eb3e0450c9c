"""The fill value of the warp (alignment/warp/_warp.py, _apply.py, _motion_field.py): a NaN or
infinite fill lands only on the pixels shifted in from outside the frame (bilinear weights
times NaN poisoned every pixel); a finite fill float32 cannot hold is refused, on the API and
the command line; CPU and GPU agree bit for bit."""

import numpy as np
import pytest
import tifffile

from cli_helpers import assert_clean_error, xcorr
from synthetic import write_stack
from xcorr_app.alignment import apply_shifts
from xcorr_app.alignment.piecewise import apply_field
from xcorr_app.alignment.warp import check_fill, shift_frames
from xcorr_app.errors import InputError

SHIFTS = np.array([[0.0, 0.0], [1.5, -2.25], [-3.0, 0.5], [0.25, 0.0]])


def border(shape, shifts, method="bilinear"):
    """``(N, H, W)`` bool: the pixels whose bilinear taps (of non-zero weight) leave the
    frame, from the float64 coordinates (``fourier``: whose source lies a pixel or more
    outside)."""
    n, (h, w) = len(shifts), shape
    out = np.zeros((n, h, w), bool)
    for k, (dy, dx) in enumerate(shifts):
        ys, xs = np.arange(h) - dy, np.arange(w) - dx
        if method == "fourier":
            row, col = (ys <= -1) | (ys >= h), (xs <= -1) | (xs >= w)
        else:
            row, col = (ys < 0) | (ys > h - 1), (xs < 0) | (xs > w - 1)
        out[k] = row[:, None] | col[None, :]
    return out


@pytest.mark.parametrize("method", ["bilinear", "fourier"])
def test_nan_fill_marks_only_the_border(rng, method):
    frames = rng.random((4, 12, 15)).astype(np.float32)
    plain = shift_frames(frames, SHIFTS, fill=0.0, method=method)
    got = shift_frames(frames, SHIFTS, fill=np.nan, method=method)
    edge = border(frames.shape[1:], SHIFTS, method)
    np.testing.assert_array_equal(np.isnan(got), edge)
    np.testing.assert_array_equal(got[~edge], plain[~edge])
    assert not np.isnan(got[0]).any()  # (frame 0 is not shifted: nothing comes from outside)


@pytest.mark.parametrize("fill", [np.inf, -np.inf])
def test_infinite_fill_gives_no_nan(rng, fill):
    frames = rng.random((4, 12, 15)).astype(np.float32)
    with np.errstate(all="raise"):  # (no warning either)
        got = shift_frames(frames, SHIFTS, fill=fill)
    edge = border(frames.shape[1:], SHIFTS)
    assert not np.isnan(got).any()
    np.testing.assert_array_equal(got[edge], np.float32(fill))
    np.testing.assert_array_equal(got[~edge], shift_frames(frames, SHIFTS)[~edge])


@pytest.mark.parametrize("fill", [-1e308, 3.5e38, 10**400, "0", True, None])
def test_a_fill_float32_cannot_hold_is_refused(rng, fill):
    frames = rng.random((2, 8, 8)).astype(np.float32)
    with pytest.raises(InputError, match="fill"):
        shift_frames(frames, SHIFTS[:2], fill=fill)
    with pytest.raises(InputError, match="fill"):
        list(apply_shifts(frames, SHIFTS[:2], fill=fill, device="cpu"))
    field = np.zeros((2, 1, 1, 2))
    with pytest.raises(InputError, match="fill"):
        list(apply_field(frames, field, np.array([[[4.0, 4.0]]]), fill=fill, device="cpu"))


def test_check_fill_keeps_what_float32_holds():
    assert check_fill(np.float32(3.4028235e38)) == float(np.float32(3.4028235e38))
    assert check_fill(-7) == -7.0 and check_fill(np.inf) == np.inf
    assert np.isnan(check_fill(np.nan))


def test_nan_fill_of_a_motion_field_marks_only_the_border(rng):
    frames = rng.random((2, 16, 16)).astype(np.float32)
    field = np.zeros((2, 1, 1, 2))
    field[1] = [2.0, -3.0]
    got = np.concatenate([c for _, c in apply_field(frames, field, np.array([[[8.0, 8.0]]]),
                                                      fill=np.nan, device="cpu")])
    np.testing.assert_array_equal(np.isnan(got), border((16, 16), field[:, 0, 0]))


def test_cli_nan_fill_leaves_the_inside_and_refuses_what_float32_cannot_hold(tmp_path, rng):
    frames = (rng.random((4, 32, 40)) * 1000).astype(np.uint16)
    src = write_stack(tmp_path / "plain.tif", frames)
    res = xcorr("align", src, "--out", tmp_path / "nan", "--fill", "nan", "--device", "cpu",
                "-q")
    assert res.returncode == 0, res.stderr
    shifts = np.loadtxt(tmp_path / "nan" / "shifts.csv", delimiter=",", skiprows=1,
                        usecols=(2, 3))
    aligned = tifffile.imread(tmp_path / "nan" / "aligned.tif")
    np.testing.assert_array_equal(np.isnan(aligned), border((32, 40), shifts))
    assert np.isfinite(aligned).sum() > aligned.size // 2
    assert_clean_error(xcorr("align", src, "--out", tmp_path / "big", "--fill", "-1e308",
                             "--device", "cpu"), "fill", "float32")
    assert not (tmp_path / "big" / "aligned.tif").exists()


@pytest.mark.parametrize("fill", ["nan", "inf", "-1", "70000"])
def test_a_fill_a_kept_integer_type_cannot_hold_is_refused(tmp_path, rng, fill):
    """--keep-dtype of uint16 with --fill nan wrote 0 (inf: 65535), a real pixel value, and
    said nothing; align, save and apply refuse it before anything is written."""
    from xcorr_app import align

    frames = (rng.random((4, 32, 40)) * 1000).astype(np.uint16)
    src = write_stack(tmp_path / "plain.tif", frames)
    res = xcorr("align", src, "--out", tmp_path / "o", "--fill", fill, "--keep-dtype",
                "--device", "cpu")
    assert_clean_error(res, "--fill", "cannot be stored in uint16 pixels (--keep-dtype)",
                       "from 0 to 65535")
    assert not (tmp_path / "o").exists()
    run = align(src, device="cpu", max_shift=4)
    with pytest.raises(InputError, match="cannot be stored in uint16 pixels"):
        run.save(tmp_path / "py", fill=float(fill), keep_dtype=True)
    assert not (tmp_path / "py").exists()
    run.save(tmp_path / "ok", fill=float(fill))  # (float32 holds it)
    res = xcorr("apply", tmp_path / "ok" / "shifts.csv", src, "--out", tmp_path / "a.tif",
                "--fill", fill, "--keep-dtype", "--device", "cpu")
    assert_clean_error(res, "cannot be stored in uint16 pixels")


@pytest.mark.gpu
@pytest.mark.parametrize("fill", [np.nan, np.inf, -np.inf, -3.5])
def test_gpu_fill_equals_the_cpu_bit_for_bit(rng, fill):
    import cupy as cp

    frames = (rng.random((4, 20, 37)) * 250).astype(np.float32)
    want = shift_frames(frames, SHIFTS, fill=fill)
    got = shift_frames(cp.asarray(frames), SHIFTS, fill=fill).get()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.isnan(got), border(frames.shape[1:], SHIFTS)
                                  if np.isnan(fill) else np.zeros(got.shape, bool))
    with pytest.raises(InputError, match="fill"):
        shift_frames(cp.asarray(frames), SHIFTS, fill=-1e308)


@pytest.mark.parametrize("fill", [-1e308, "0"])
def test_a_bad_fill_is_refused_when_asked_not_when_read(tmp_path, rng, fill):
    """apply_shifts and AlignResult.apply raise on the call (their chunks come lazily), the
    command line before it opens the input (it was checked after measuring)."""
    from xcorr_app import align

    frames = rng.random((2, 16, 16)).astype(np.float32)
    with pytest.raises(InputError, match="fill"):
        apply_shifts(frames, SHIFTS[:2], fill=fill, device="cpu")
    res = align(frames, device="cpu", verify=False)
    with pytest.raises(InputError, match="fill"):
        res.apply(fill=fill)
    if isinstance(fill, float):
        missing = tmp_path / "missing.tif"  # (the fill is named, not the input)
        assert_clean_error(xcorr("align", missing, "--out", tmp_path / "out", "--fill", fill),
                           "--fill", "float32")
        assert not (tmp_path / "out").exists()


#: shifts whose outside taps weigh so little that the inside ones' weights sum to 1.0 in
#: float32 (the fill's rest rounds to 0: 0 * inf was NaN), with ordinary ones
TINY = np.array([[-1.7e-7, -1.6e-8], [1e-9, 0.0], [0.0, -3e-8], [2.5, 1e-12], [0.0, 0.0]])


def float32_border(shape, shifts):
    """:func:`border` by the warp's float32 weights: a tap outside whose weight rounds to 0
    (a shift of 1e-9 towards the frame) leaves the pixel inside."""
    n, (h, w) = len(shifts), shape
    out = np.zeros((n, h, w), bool)
    for k, (dy, dx) in enumerate(shifts):
        sides = []
        for size, d in ((h, dy), (w, dx)):
            s = np.arange(size) - d
            s0 = np.floor(s)
            frac = (s - s0).astype(np.float32)
            sides.append(((s0 < 0) & (np.float32(1) - frac != 0))
                         | ((s0 + 1 > size - 1) & (frac != 0)))
        out[k] = sides[0][:, None] | sides[1][None, :]
    return out


@pytest.mark.parametrize("shape", [(7, 9), (20, 37), (64, 5)])
@pytest.mark.parametrize("fill", [np.inf, -np.inf, np.nan])
def test_a_non_finite_fill_is_every_border_pixel_even_at_tiny_shifts(rng, shape, fill):
    """A NaN or infinite fill is the pixel wherever a tap of weight lies outside (the blend's
    limit), never NaN for an infinity; the other pixels are those of fill 0."""
    frames = (rng.random((len(TINY), *shape)) * 300).astype(np.float32)
    got = shift_frames(frames, TINY, fill=fill)
    edge = float32_border(shape, TINY)
    assert edge[[0, 2, 3]].any(axis=(1, 2)).all() and not edge[[1, 4]].any()
    last = np.zeros(shape, bool)
    last[-1], last[:, -1] = True, True
    np.testing.assert_array_equal(edge[0], last)  # (1.7e-7 and 1.6e-8 px in from outside)
    np.testing.assert_array_equal(got[edge], np.float32(fill))
    np.testing.assert_array_equal(got[~edge], shift_frames(frames, TINY)[~edge])
    if not np.isnan(fill):
        assert not np.isnan(got).any()


def test_a_finite_fill_still_blends_at_the_border(rng):
    frames = rng.random((2, 9, 11)).astype(np.float32)
    shifts = np.array([[0.5, 0.0], [0.0, -0.25]])
    got = shift_frames(frames, shifts, fill=10.0)
    plain = shift_frames(frames, shifts)
    np.testing.assert_allclose(got[0, 0], plain[0, 0] + np.float32(0.5) * 10, rtol=1e-6)
    np.testing.assert_allclose(got[1, :, -1], plain[1, :, -1] + np.float32(0.25) * 10,
                               rtol=1e-6)


@pytest.mark.parametrize("fill", [np.inf, -np.inf, np.nan])
def test_a_non_finite_fill_of_volumes_is_every_border_voxel(rng, fill):
    """3-D (``align --volumes``' aligned.tif): the same rule; at a zero shift no voxel is
    fill (the blend with a weight of 0 made every border voxel NaN)."""
    from xcorr_app.alignment.volume import shift_volumes

    stack = rng.random((3, 5, 8, 9)).astype(np.float32)
    shifts = [[0.0, 0.0, 0.0], [1e-8, 0.0, 0.0], [0.5, -1.0, 2.25]]
    got = list(shift_volumes(stack, shifts, fill=fill, device="cpu"))
    plain = list(shift_volumes(stack, shifts, fill=0.0, device="cpu"))
    np.testing.assert_array_equal(got[0], plain[0])
    np.testing.assert_array_equal(got[0], stack[0])
    for (dz, dy, dx), g, p in zip(shifts[1:], got[1:], plain[1:]):
        zs, ys, xs = (np.arange(n) - d for n, d in zip(g.shape, (dz, dy, dx)))
        edge = (((zs < 0) | (zs > g.shape[0] - 1))[:, None, None]
                | ((ys < 0) | (ys > g.shape[1] - 1))[None, :, None]
                | ((xs < 0) | (xs > g.shape[2] - 1))[None, None, :])
        assert edge.any() and not edge.all()
        np.testing.assert_array_equal(g[edge], np.float32(fill))
        np.testing.assert_array_equal(g[~edge], p[~edge])


@pytest.mark.gpu
@pytest.mark.parametrize("fill", [np.nan, np.inf, -np.inf, 7.5])
@pytest.mark.parametrize("dtype", [np.float32, np.uint16])
def test_gpu_fill_at_tiny_shifts_equals_the_cpu(rng, fill, dtype):
    """The kernel (``warp_shift.cu``): a non-finite fill is the border pixel, as on the CPU,
    into float32 and into the frames' own type (rounded in the kernel: an infinity clipped)."""
    import cupy as cp

    frames = (rng.random((len(TINY), 20, 37)) * 250).astype(dtype)
    for out in (None, dtype):
        want = shift_frames(frames, TINY, fill=fill, dtype=out)
        got = shift_frames(cp.asarray(frames), TINY, fill=fill, dtype=out).get()
        np.testing.assert_array_equal(got, want)
    got = shift_frames(cp.asarray(frames), TINY, fill=fill).get()
    np.testing.assert_array_equal(np.isnan(got), float32_border((20, 37), TINY)
                                  if np.isnan(fill) else np.zeros(got.shape, bool))


@pytest.mark.gpu
@pytest.mark.parametrize("fill", [np.inf, np.nan])
def test_gpu_non_finite_fill_of_volumes_marks_the_cpus_border(rng, fill):
    from xcorr_app.alignment.volume import shift_volumes

    stack = rng.random((2, 5, 8, 9)).astype(np.float32)
    shifts = [[1e-8, 0.0, 0.0], [0.5, -1.0, 2.25]]
    for cpu, gpu in zip(shift_volumes(stack, shifts, fill=fill, device="cpu"),
                        shift_volumes(stack, shifts, fill=fill, device="gpu")):
        np.testing.assert_array_equal(np.isfinite(gpu), np.isfinite(cpu))
        np.testing.assert_allclose(gpu[np.isfinite(cpu)], cpu[np.isfinite(cpu)], atol=1e-5)
        assert not np.isnan(gpu).any() or np.isnan(fill)
