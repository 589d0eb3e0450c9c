"""Applying shifts to frames (batched, NumPy or CuPy).

Examples
--------
>>> import numpy as np
>>> f = np.zeros((1, 5, 5)); f[0, 2, 2] = 1.0
>>> out = shift_frames(f, np.array([[1.0, -1.0]]))
>>> np.argwhere(out[0] == 1.0).tolist()
[[3, 1]]
"""

from __future__ import annotations

import operator

import numpy as np

from ..._cuda import KernelFamily, PIXEL_C_TYPES, kernel_pixels
from ...backend import array_module_of, is_cupy_array, to_numpy, to_xp
from ...correlate import fft_of
from ...errors import InputError


RESAMPLE = ("bilinear", "fourier")
#: the largest shift the bilinear warp computes with (larger ones: the frame is all fill)
FAR_SHIFT = 1e15
THREADS = 128
#: the bilinear shift on the GPU in one kernel of ours (it ships built): its NumPy lines below
#: as about twenty CuPy operations cost a first run on a fresh machine as many NVRTC
#: compilations
WARP_SHIFT = KernelFamily("warp_shift.cu", "warp_shift",
                         [(t, "float", THREADS) for t in PIXEL_C_TYPES.values()]
                         + [(t, t, THREADS) for d, t in PIXEL_C_TYPES.items() if d.kind in "iu"])
#: the template's sums on the GPU in one kernel a chunk (:func:`add_shifted`)
WARP_SUM = KernelFamily("warp_shift.cu", "warp_sum",
                       [(t, THREADS) for t in PIXEL_C_TYPES.values()])
#: frames per launch (the grid's y extent is at most 65535)
MAX_GRID = 65535
#: frames warped at once by :func:`add_shifted` on the CPU (its temporaries)
SUM_BATCH = 8
#: the CPU shifts frames of at least this many pixels one at a time (:func:`_bilinear_by_frame`;
#: smaller ones as one batch, where a frame's fixed cost of calls would dominate: the two meet
#: near 56x56)
BY_FRAME = 4096
#: bytes of the temporaries of the frames moved circularly at once by :func:`add_shifted`
#: (their spectra and phase ramps: about 56 bytes a pixel), and the most frames at once
CIRCULAR_BATCH_BYTES = 1 << 30
CIRCULAR_BATCH = 64


def check_fill(fill):
    """``fill`` as a float: InputError unless a real number the float32 aligned frames hold
    (NaN and the infinities included; a finite value beyond float32's range is refused).

    >>> check_fill(-3), check_fill(float("nan")) != check_fill(float("nan"))
    (-3.0, True)
    """
    if isinstance(fill, (bool, np.bool_)) or not isinstance(fill, (int, float, np.integer,
                                                                   np.floating)):
        raise InputError(f"fill must be a number, got {fill!r}")
    try:
        value = float(fill)
    except OverflowError:  # (an int beyond float64)
        value = float("inf") if fill > 0 else float("-inf")
        finite = True
    else:
        finite = np.isfinite(value)
    with np.errstate(over="ignore"):
        fits = not finite or np.isfinite(np.float32(value))
    if not fits:
        raise InputError(f"fill {fill!r} does not fit the aligned frames' float32: at most "
                         f"{float(np.finfo(np.float32).max):.6g} in magnitude (or nan, inf, "
                         "-inf)")
    return value


def check_shifts(shifts, n_frames, frame_shape=None):
    """``shifts`` as ``(n_frames, 2)`` float64 ``(dy, dx)``: InputError for another shape, a
    value that is not a number, an infinite one, or (given ``frame_shape``) one that moves a
    frame wholly out of its frame (it would be written blank).  NaN (no shift measured) is
    kept: the frame is left unshifted.

    >>> check_shifts([[0.5, float("nan")]], 1, (8, 8)).tolist()
    [[0.5, nan]]
    >>> check_shifts([[8.0, 0.0]], 1, (8, 8))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: the shift (dy, dx) = (8, 0) of frame 0 moves it wholly out ...
    """
    try:
        s = np.asarray(shifts, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"shifts must be numbers (dy, dx) per frame: {exc}") from None
    if s.shape != (n_frames, 2):
        raise InputError(f"shifts of shape {s.shape} do not match {n_frames} frames")
    h, w = (np.inf, np.inf) if frame_shape is None else frame_shape
    with np.errstate(invalid="ignore"):  # (NaN compares False: kept)
        out = np.isinf(s).any(axis=1) | (np.abs(s[:, 0]) >= h) | (np.abs(s[:, 1]) >= w)
    if out.any():
        k, more = int(np.flatnonzero(out)[0]), int(out.sum()) - 1
        what = "is infinite" if np.isinf(s[k]).any() else \
            f"moves it wholly out of its {h}x{w} frame"
        raise InputError(f"the shift (dy, dx) = ({s[k, 0]:.6g}, {s[k, 1]:.6g}) of frame {k} "
                         f"{what}{f' ({more} more frames too)' if more else ''}; a shift is "
                         "finite and smaller than the frame")
    return s


def frames_type(dtype) -> np.dtype:
    """The type shifted frames are given in for ``dtype``: an integer type as it is (the frames
    rounded to nearest and clipped, :func:`xcorr_app.io.as_dtype`), float32 for None or any
    float type (the frames are computed in float32); InputError for any other.

    >>> frames_type(None), frames_type("float64"), frames_type("uint16")
    (dtype('float32'), dtype('float32'), dtype('uint16'))
    """
    try:
        got = np.dtype(np.float32 if dtype is None else dtype)
    except TypeError:
        got = None
    if got is not None and got.kind == "f":
        return np.dtype(np.float32)
    if got is None or got.kind not in "iu":
        raise InputError(f"shifted frames are given as float32 or an integer type, got {dtype!r}")
    return got


def shift_frames(frames, shifts, fill=0.0, method="bilinear", dtype=None, area=None):
    """Shift every frame by its ``(dy, dx)`` (bilinear interpolation or a Fourier phase ramp).

    ``out[n, y, x] = frames[n, y - dy, x - dx]``: applying the shifts that
    :func:`xcorr_app.align` returns aligns the frames with the reference.  Pixels whose source
    lies outside the frame get ``fill`` (those whose bilinear taps are partly outside blend
    towards a finite fill, and are a NaN or infinite fill itself; the others never see it, so
    a NaN fill marks only the border); NaN shifts are treated as 0.

    Parameters
    ----------
    frames : (N, H, W) ndarray
    shifts : (N, 2) ndarray
    fill : float
        A number float32 holds, or NaN or an infinity (:func:`check_fill`).
    method : {"bilinear", "fourier"}
        ``fourier`` multiplies each frame's spectrum by the phase ramp of its shift: exact for
        band-limited frames, no smoothing; the area shifted in from outside gets ``fill``.
    dtype : dtype, optional
        The type of the result (:func:`frames_type`): float32 (default, and for any float
        type), or an integer type, the float32 frames rounded to nearest and clipped to its
        range (:func:`xcorr_app.io.as_dtype`; on the GPU, bilinear, in the kernel itself where
        it is the frames' own type).
    area : (y0, y1, x0, x1), optional
        Only this region of the result (C-contiguous, the same values); on the GPU (bilinear)
        only it is computed.

    Returns
    -------
    (N, H, W) ndarray of ``dtype`` (float32) of the module of ``frames``, or
    (N, y1 - y0, x1 - x0) with ``area``.
    """
    if method not in RESAMPLE:
        raise InputError(f"unknown resampling {method!r}; use bilinear or fourier")
    fill = check_fill(fill)
    out_type = frames_type(dtype)
    window = None if area is None else _window(area, frames.shape)
    if method == "bilinear" and is_cupy_array(frames):
        fused = out_type in (np.float32, frames.dtype) and out_type in PIXEL_C_TYPES
        moved = _shift_bilinear_gpu(frames, shifts, fill, out_type if fused else None, window)
    else:
        moved = _shift_float32(frames, shifts, fill, method, window)
    if moved.dtype == out_type:
        return moved
    from ...io import as_dtype  # (the writers' module: imported only where it is needed)

    return as_dtype(moved, out_type)


def _shift_float32(frames, shifts, fill, method, window=None):
    """:func:`shift_frames` in float32 by array operations (the definition; the CPU's), the
    ``window`` ``(y0, y1, x0, x1)`` of the result (None: all of it)."""
    xp = array_module_of(frames)
    floating = frames.dtype.kind == "f"
    frames = frames.astype(xp.float32, copy=False)
    # (NaN: 0; an infinite or huge shift far outside, as the kernel's finite_shift has it)
    shifts = xp.clip(xp.nan_to_num(to_xp(shifts, xp).astype(xp.float64), nan=0.0),
                     -FAR_SHIFT, FAR_SHIFT)
    # a tap of weight 0 on a NaN or Inf pixel adds nothing (0 * inf, NaN, spread to neighbours)
    skip_zero = method != "fourier" and floating and not bool(xp.isfinite(frames).all())
    if method != "fourier" and xp is np and frames.shape[-2] * frames.shape[-1] >= BY_FRAME:
        return _bilinear_by_frame(frames, shifts, fill, skip_zero, window)
    if method == "fourier":
        moved = _shift_fourier(frames, shifts, fill, xp)
    else:
        moved = _shift_gathered(frames, shifts, fill, skip_zero, xp)
    if window is None:
        return moved
    y0, y1, x0, x1 = window
    return xp.ascontiguousarray(moved[:, y0:y1, x0:x1])


def _bilinear_by_frame(frames, shifts, fill, skip_zero, window=None):
    """:func:`_shift_gathered`'s float32 operations in its order, so its bits, a frame at a
    time on NumPy: a frame's taps are its rows and its columns, each tap's weights the
    product of a row's and a column's (:func:`_axis_taps`), gathered on one axis and then the
    other (:func:`_along`: a view where the sources run on), and only the pixels of
    ``window``; where every tap of the window lies inside the frame, no edge to blend.  (The
    whole batch gathered through three broadcast index arrays took most of a CPU run's
    quality report: docs/performance.md.)"""
    n, h, w = frames.shape
    y0, y1, x0, x1 = (0, h, 0, w) if window is None else window
    out = np.zeros((n, y1 - y0, x1 - x0), np.float32)
    if out.size == 0:
        return out
    for k in range(n):
        f, o = frames[k], out[k]
        s = shifts[k if len(shifts) > 1 else 0]  # (one shift: every frame's)
        rows = _axis_taps(y0, y1, s[0], h)
        cols = _axis_taps(x0, x1, s[1], w)
        inside = all(v.all() for _, v, _ in rows + cols)
        weight = None if inside else np.zeros(o.shape, np.float32)
        edge = None if inside else np.zeros(o.shape, bool)
        for wy_, vy, yy in rows:
            picked = _along(f, yy, 0)
            for wx_, vx, xx in cols:
                tap = wy_[:, None] * wx_[None, :]
                valid = None if inside else vy[:, None] & vx[None, :]
                wgt = tap if inside else tap * valid  # (times 1 where all are inside: tap)
                g = _along(picked, xx, 1)
                if skip_zero:
                    with np.errstate(invalid="ignore"):
                        o += np.where(wgt == 0, np.float32(0), wgt * g)
                else:
                    o += wgt * g
                if not inside:
                    weight += wgt
                    edge |= (tap != 0) & ~valid
        if inside:
            continue
        if not np.isfinite(fill):
            out[k] = np.where(edge, np.float32(fill), o)
        else:
            out[k] = np.where(edge, o + (1 - weight) * np.float32(fill), o)
    return out


def _along(a, index, axis):
    """``a.take(index, axis)``, a view where ``index`` runs on by one (a shifted frame's
    sources mostly do: no copy)."""
    first = int(index[0])
    if index[-1] - first == len(index) - 1 and (np.diff(index) == 1).all():
        return a[first:first + len(index)] if axis == 0 else a[:, first:first + len(index)]
    return a.take(index, axis=axis)


def _axis_taps(a, b, shift, size):
    """``[(weights, inside, index), ...]`` of the two taps along one axis of positions
    ``a:b`` of a frame ``size`` long moved by ``shift`` (float64), as :func:`_shift_gathered`
    computes them: each tap's float32 weight, whether its source lies inside, and its source
    index clipped into the frame."""
    pos = np.arange(a, b, dtype=np.float64) - shift
    first = np.floor(pos)
    frac = (pos - first).astype(np.float32)
    first = first.astype(np.int64)
    out = []
    for d, wgt in ((0, 1 - frac), (1, frac)):
        at = first + d
        out.append((wgt, (at >= 0) & (at < size), np.clip(at, 0, size - 1)))
    return out


def _shift_gathered(frames, shifts, fill, skip_zero, xp):
    """The bilinear lines of :func:`shift_frames` on the whole batch at once (the definition)."""
    n, h, w = frames.shape
    ys = xp.arange(h, dtype=xp.float64)[None, :, None] - shifts[:, 0, None, None]
    xs = xp.arange(w, dtype=xp.float64)[None, None, :] - shifts[:, 1, None, None]
    y0, x0 = xp.floor(ys), xp.floor(xs)
    wy, wx = (ys - y0).astype(xp.float32), (xs - x0).astype(xp.float32)
    y0, x0 = y0.astype(xp.int64), x0.astype(xp.int64)
    batch = xp.arange(n)[:, None, None]
    out = xp.zeros((n, h, w), dtype=xp.float32)
    weight = xp.zeros((n, h, w), dtype=xp.float32)
    edge = xp.zeros((n, h, w), dtype=bool)
    for dy, wy_ in ((0, 1 - wy), (1, wy)):
        yy = y0 + dy
        vy = (yy >= 0) & (yy < h)
        yy = xp.clip(yy, 0, h - 1)
        for dx, wx_ in ((0, 1 - wx), (1, wx)):
            xx = x0 + dx
            vx = (xx >= 0) & (xx < w)
            xx = xp.clip(xx, 0, w - 1)
            tap = wy_ * wx_
            wgt = tap * (vy & vx)
            if skip_zero:
                with np.errstate(invalid="ignore"):
                    out += xp.where(wgt == 0, xp.float32(0), wgt * frames[batch, yy, xx])
            else:
                out += wgt * frames[batch, yy, xx]
            weight += wgt
            edge |= (tap != 0) & ~(vy & vx)
    # the fill blends in only where a tap of weight lies outside: a NaN or infinite fill
    # times the (0 or rounding) rest of an inside pixel would poison every pixel; there a
    # NaN or infinite fill is the pixel (the blend's limit; its rest may round to 0: 0 * inf)
    if not np.isfinite(fill):
        return xp.where(edge, np.float32(fill), out)
    return xp.where(edge, out + (1 - weight) * np.float32(fill), out)


def add_shifted(total, coverage, frames, shifts, idx=None, circular=False):
    """Add the frames ``idx`` (default all) of ``frames`` ``(N, H, W)``, each shifted by its
    row of ``shifts`` ``(len(idx), 2)`` (:func:`shift_frames`, bilinear, fill 0; non-finite
    pixels count as 0), to ``total`` ``(H, W)`` float64, and the same shift of a frame of
    ones to ``coverage``: the sums of a template (in place, on their device).

    ``circular``: wrap-around frames, each moved circularly by the Fourier phase of its shift
    (nothing leaves the frame, so every pixel is covered once per frame): a bilinear shift
    would smooth the template and leave its edges to the first frame.

    On the GPU one kernel (``kernels/alignment/warp_shift.cu`` ``warp_sum``: the float32 operations
    of the lines below, summed in float64 in frame order; the CPU sums batches pairwise, so the
    two agree to float64 rounding).

    >>> total, cover = np.zeros((2, 3)), np.zeros((2, 3))
    >>> add_shifted(total, cover, np.ones((2, 2, 3)), np.array([[0.0, 1.0], [0.0, 0.0]]))
    >>> total.tolist(), cover.tolist()
    ([[1.0, 2.0, 2.0], [1.0, 2.0, 2.0]], [[1.0, 2.0, 2.0], [1.0, 2.0, 2.0]])
    """
    idx = np.arange(len(frames)) if idx is None else np.asarray(idx, np.int64)
    shifts = np.asarray(to_numpy(shifts), np.float64).reshape(-1, 2)
    if len(shifts) != len(idx):
        raise InputError(f"{len(shifts)} shifts for {len(idx)} frames")
    if not len(idx):
        return
    if circular:
        _add_circular(total, coverage, frames, idx, shifts)
        return
    if is_cupy_array(total):
        _add_shifted_gpu(total, coverage, frames, idx, shifts)
        return
    for a in range(0, len(idx), SUM_BATCH):  # (NumPy)
        f = np.asarray(frames[idx[a:a + SUM_BATCH]]).astype(np.float32)
        f = np.where(np.isfinite(f), f, 0.0)
        s = shifts[a:a + SUM_BATCH]
        total += shift_frames(f, s).sum(axis=0, dtype=np.float64)
        coverage += shift_frames(np.ones_like(f), s).sum(axis=0, dtype=np.float64)


def _add_circular(total, coverage, frames, idx, shifts):
    xp = array_module_of(total)
    batch = max(1, min(CIRCULAR_BATCH, CIRCULAR_BATCH_BYTES // (56 * total.size)))
    for a in range(0, len(idx), batch):
        f = xp.asarray(frames[to_xp(idx[a:a + batch], xp)]).astype(xp.float32)
        f = xp.where(xp.isfinite(f), f, xp.float32(0))
        s = to_xp(shifts[a:a + batch], xp)
        total += _shift_fourier(f, s, 0.0, xp, wrap=True).sum(axis=0, dtype=xp.float64)
        coverage += len(f)


def _add_shifted_gpu(total, coverage, frames, idx, shifts):
    import cupy as cp

    frames, c_type = kernel_pixels(frames)
    n, h, w = frames.shape
    for a in (total, coverage):
        if not (isinstance(a, cp.ndarray) and a.dtype == cp.float64 and a.shape == (h, w)
                and a.flags.c_contiguous):
            raise InputError(f"total and coverage must be C-contiguous float64 CuPy arrays of "
                             f"shape {(h, w)}")
    if idx.min() < 0 or idx.max() >= n:
        raise InputError(f"frame indices must lie in 0..{n - 1}")
    WARP_SUM.get(c_type, THREADS)((h,), (THREADS,), (
        frames, cp.asarray(idx.astype(np.int32)), cp.asarray(shifts), np.int32(len(idx)),
        np.int32(h), np.int32(w), total, coverage))


def _window(area, shape):
    """``area`` ``(y0, y1, x0, x1)`` of frames of ``shape`` (N, H, W), checked."""
    h, w = shape[-2:]
    try:
        if any(isinstance(v, (bool, np.bool_)) for v in area):
            raise TypeError
        y0, y1, x0, x1 = (operator.index(v) for v in area)
    except (TypeError, ValueError):
        raise InputError(f"area must be four integers (y0, y1, x0, x1), got {area!r}") from None
    if not (0 <= y0 <= y1 <= h and 0 <= x0 <= x1 <= w):
        raise InputError(f"area {(y0, y1, x0, x1)} does not lie in frames of {h}x{w}")
    return y0, y1, x0, x1


def shift_into(frames, shifts, out):
    """``out`` (n, h, w) float32 CuPy, C-contiguous: ``frames`` (n, h, w) CuPy shifted by
    ``shifts`` as :func:`shift_frames` shifts them (bilinear, fill 0), written in place (no
    copy of a result into it)."""
    _shift_bilinear_gpu(frames, shifts, 0.0, into=out)
    return out


def _shift_bilinear_gpu(frames, shifts, fill, dtype=None, window=None, into=None):
    """The bilinear lines of :func:`shift_frames` as one kernel
    (``kernels/alignment/warp_shift.cu``: the same float32 operations, so the same bits);
    ``dtype``: float32 (None) or the frames' own integer type, rounded in the kernel;
    ``window``: ``(y0, y1, x0, x1)``, the region computed (None: the whole frame); ``into``:
    the C-contiguous array of the result's shape and type it is written to."""
    import cupy as cp

    if frames.ndim != 3:
        raise InputError(f"frames must be (N, H, W), got shape {tuple(frames.shape)}")
    frames, c_type = kernel_pixels(frames)
    out_type = np.dtype(np.float32 if dtype is None else dtype)
    o_type = PIXEL_C_TYPES[out_type]
    nf, h, w = frames.shape
    if isinstance(shifts, cp.ndarray) and shifts.dtype == cp.float64:
        s = cp.ascontiguousarray(shifts)
    else:  # (NaN and Inf are the kernel's to treat, as nan_to_num does)
        s = cp.asarray(np.ascontiguousarray(to_numpy(shifts), dtype=np.float64))
    ns = s.shape[0] if s.ndim == 2 else 0
    n = max(nf, ns)
    if s.ndim != 2 or s.shape[1] != 2 or (nf != n and nf != 1) or (ns != n and ns != 1):
        raise InputError(f"shifts of shape {tuple(s.shape)} do not fit {nf} frames: (N, 2), "
                         "N the frames' count or 1")
    y0, y1, x0, x1 = window or (0, h, 0, w)
    shape = (n, y1 - y0, x1 - x0)
    if into is not None and (into.shape != shape or into.dtype != out_type
                             or not into.flags.c_contiguous):
        raise ValueError(f"shifted frames {shape} {out_type} into {into.shape} {into.dtype}")
    out = cp.empty(shape, out_type) if into is None else into
    if out.size == 0:
        return out
    kernel = WARP_SHIFT.get(c_type, o_type, THREADS)
    for a in range(0, n, MAX_GRID):
        b = min(n, a + MAX_GRID)
        kernel((y1 - y0, b - a), (THREADS,),
               (frames, out, s, np.int32(a), np.int32(nf > 1), np.int32(ns > 1), np.int32(h),
                np.int32(w), np.int32(y0), np.int32(x0), np.int32(y1 - y0), np.int32(x1 - x0),
                np.float32(fill)))
    return out


def _shift_fourier(frames, shifts, fill, xp, wrap=False):
    n, h, w = frames.shape
    ky = xp.fft.fftfreq(h)[None, :, None]
    kx = xp.fft.fftfreq(w)[None, None, :]
    ramp = xp.exp(-2j * np.pi * (ky * shifts[:, 0, None, None] + kx * shifts[:, 1, None, None]))
    fft = fft_of(xp)
    out = fft.ifft2(fft.fft2(frames) * ramp.astype(xp.complex64)).real.astype(xp.float32)
    if wrap:  # (moved circularly: what leaves one edge comes in at the other)
        return out
    ys = xp.arange(h)[None, :, None] - shifts[:, 0, None, None]
    xs = xp.arange(w)[None, None, :] - shifts[:, 1, None, None]
    inside = (ys > -1) & (ys < h) & (xs > -1) & (xs < w)  # the source lies in the frame
    return xp.where(inside, out, np.float32(fill)).astype(xp.float32)


def common_area(shifts, frame_shape):
    """``(y0, y1, x0, x1)``: the region every shifted frame covers (NaN shifts ignored)."""
    h, w = frame_shape
    s = np.asarray(shifts, dtype=np.float64)
    s = s[~np.isnan(s).any(axis=1)]
    if not len(s):
        return 0, h, 0, w
    y0 = max(0, int(np.ceil(s[:, 0].max() - 1e-9)))
    y1 = min(h, int(np.floor(h - 1 + s[:, 0].min() + 1e-9)) + 1)
    x0 = max(0, int(np.ceil(s[:, 1].max() - 1e-9)))
    x1 = min(w, int(np.floor(w - 1 + s[:, 1].min() + 1e-9)) + 1)
    if y1 <= y0 or x1 <= x0:
        raise InputError("the shifted frames have no area in common; pad with fill=VALUE "
                         "instead of crop=True")
    return y0, y1, x0, x1


def check_out(out, shape):
    """InputError unless ``out`` is None or a writeable C-contiguous float32 NumPy array of
    ``shape`` (the aligned frames of :func:`apply_shifts` and
    :func:`~xcorr_app.alignment.piecewise._motion_field.apply_field`)."""
    if out is None:
        return
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 \
            or out.shape != tuple(shape) or not out.flags.c_contiguous \
            or not out.flags.writeable:
        got = f"{out.dtype} {out.shape}" if isinstance(out, np.ndarray) else type(out).__name__
        raise InputError(f"out must be a writeable C-contiguous float32 NumPy array of shape "
                         f"{tuple(shape)}, got {got}")
