"""The resampling of piecewise-rigid registration, one definition on both devices: NumPy here
(the reference) and the kernels of ``kernels/alignment/patch_field.cu`` (one launch per chunk each),
equal to float rounding.

* :func:`cubic_sample`: cubic convolution (Keys, ``a = -0.5``: exact for quadratics, local, 4x4
  taps) at float64 coordinates, the taps clamped to the image.  It replaces the cubic
  B-spline of ``map_coordinates(order=3)``: the B-spline needs a prefilter over the whole
  frame (a recursive filter whose boundary handling SciPy and CuPy implement differently, and
  which CuPy runs in float32 for float32 frames), so its GPU and CPU results differ by more than
  rounding; a local kernel is the same sum on both.
* :func:`bilinear_sample`: ``map_coordinates(order=1, mode="constant")`` without reading taps of
  weight 0 (the warp's default).
* The field at a pixel, from the patch shifts: ``(wy @ S @ wx.T)[y, x]`` (the spline weights of
  :mod:`._motion_field`), evaluated per pixel in the kernels (no dense field per chunk).

Examples
--------
>>> img = np.arange(20.0).reshape(4, 5)
>>> float(cubic_sample(img, np.array([1.5]), np.array([2.0]))[0])  # linear image: exact
9.5
"""

from __future__ import annotations

import numpy as np

from ..._cuda import (KernelFamily, PIXEL_C_TYPES, compile_together, kept_on_device, kernel_pixels,
                     stride_blocks)
from ...backend import array_module_of, to_numpy
from ...errors import InputError
from ...registration import table_layout

#: the resamplings of the warp
FIELD_RESAMPLE = ("bilinear", "cubic")

SOURCE = "patch_field.cu"
THREADS = 128
GATHER = KernelFamily(SOURCE, "patch_windows", [(THREADS,)])
#: the windows and their summed-area tables: a thread a window column, at most this many
TABLES_THREADS = 256
GATHER_TABLES = KernelFamily(SOURCE, "patch_windows_tables", [(TABLES_THREADS,)])
THROUGH = KernelFamily(SOURCE, "windows_through", [(THREADS,)])
#: grid widths the warp is compiled for (its field's sums unrolled, a column's weights in
#: registers); others: 0 (any width)
WARP_GX = (4, 8)
#: rows of a tile of the warp (a thread a column walking down them); their coefficients take
#: at most WARP_COEF doubles of shared memory
WARP_BAND, WARP_COEF = 32, 4096
WARP = KernelFamily(SOURCE, "warp_field", [(t, c, THREADS, g) for t in PIXEL_C_TYPES.values()
                                           for c in (False, True) for g in (0,) + WARP_GX])
FINITE = KernelFamily(SOURCE, "finite_field", [()])
ADD = KernelFamily(SOURCE, "add_fields", [()])
#: frames per launch (the grid's y and z extents are at most 65535)
MAX_GRID = 65535
#: the cubic convolution's parameter (Keys 1981)
KEYS_A = -0.5


def keys_weights(t):
    """The four weights (taps at -1, 0, 1, 2) of cubic convolution for fractions ``t``."""
    a = KEYS_A

    def outer(d):
        return ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a

    def inner(d):
        return ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0

    return outer(t + 1.0), inner(t), inner(1.0 - t), outer(2.0 - t)


def cubic_sample(image, cy, cx):
    """Cubic convolution of the 2-D ``image`` (read as float32) at ``(cy, cx)`` (float64
    arrays of one shape), taps clamped to the image; float64, summed as the kernel sums."""
    h, w = image.shape
    # the pixels as float32, then float64 (exact) once, read by flat index: the same numbers
    # as 16 two-index reads converted one by one, in a third of the time
    f = np.asarray(image, np.float32).astype(np.float64).ravel()
    cy = np.clip(cy, -8.0, h + 7.0)
    cx = np.clip(cx, -8.0, w + 7.0)
    fy, fx = np.floor(cy), np.floor(cx)
    wy, wx = keys_weights(cy - fy), keys_weights(cx - fx)
    y0, x0 = fy.astype(np.int64) - 1, fx.astype(np.int64) - 1
    cols = [np.clip(x0 + k, 0, w - 1) for k in range(4)]
    acc = np.zeros(np.shape(cy))
    for k in range(4):
        base = np.clip(y0 + k, 0, h - 1) * w
        r = wx[0] * f.take(base + cols[0])
        for j in range(1, 4):
            r = r + wx[j] * f.take(base + cols[j])
        acc = acc + wy[k] * r
    return acc


def bilinear_sample(image, cy, cx, fill):
    """Bilinear samples of the 2-D ``image`` (read as float32) at ``(cy, cx)`` (float64 arrays
    of one shape), ``fill`` outside ``[0, H - 1] x [0, W - 1]``: ``map_coordinates(order=1,
    mode="constant", cval=fill)``, except that a tap of weight 0 is not read (as the GPU's
    kernel, ``kernels/alignment/patch_field.cu``): SciPy multiplies it, so a NaN pixel spread to the
    outputs above and left of it when the field put them on pixels (a zero field)."""
    h, w = image.shape
    f = np.asarray(image, np.float32)
    cy, cx = np.asarray(cy, np.float64), np.asarray(cx, np.float64)
    inside = (cy >= 0) & (cy <= h - 1) & (cx >= 0) & (cx <= w - 1)
    y, x = np.where(inside, cy, 0.0), np.where(inside, cx, 0.0)
    fy, fx = np.floor(y), np.floor(x)
    ty, tx = y - fy, x - fx
    y0, x0 = fy.astype(np.int64), fx.astype(np.int64)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)

    flat = np.ascontiguousarray(f).reshape(-1)

    def row(r):  # one row of taps, the right one only where its weight is not 0
        # (flat indices and take: the same values as f[r, x0], three times as fast)
        at = r * w
        a = flat.take(at + x0).astype(np.float64)
        b = np.where(tx != 0, flat.take(at + x1), 0.0).astype(np.float64)
        return np.where(tx != 0, (1.0 - tx) * a + tx * b, a)

    top = row(y0)
    bottom = np.where(ty != 0, row(y1), 0.0)
    out = np.where(ty != 0, (1.0 - ty) * top + ty * bottom, top)
    return np.where(inside, out, float(fill))


def window_starts(starts_y, starts_x):
    """The windows' starts as int32 CuPy arrays, uploaded once per grid and device."""
    return tuple(kept_on_device(np.asarray(v, np.int32)) for v in (starts_y, starts_x))


def device_weights(weights, s, frames):
    """``(wy, wx_t, s)``: the spline weights (``wx`` transposed, ``(gx, W)``: the layout the
    kernels read) and the patch field as C-contiguous float64 CuPy arrays (NaN: 0, as
    ``nan_to_num``: ``finite_field`` in ``patch_field.cu``), checked against each other and the
    frames (the kernels index them unchecked)."""
    import cupy as cp

    wy, wx = (cp.ascontiguousarray(cp.asarray(a, cp.float64)) for a in weights)
    wx_t = getattr(weights, "wx_t", None)
    if wx_t is None:  # (weights not of field_weights: transposed on the host, once a call)
        wx_t = _transposed_on_device(weights, np.float64)
    s = cp.ascontiguousarray(cp.asarray(s, cp.float64))
    finite = cp.empty_like(s)  # NaN 0 (as nan_to_num; a kernel of ours: nothing to compile)
    if s.size:
        FINITE.get()((stride_blocks(s.size, 256, 1024),), (256,),
                     (s, finite, np.int64(s.size)))
    s = finite
    n, h, w = frames.shape
    if s.ndim != 4 or s.shape[0] != n or s.shape[3] != 2 or wy.ndim != 2 or wx.ndim != 2 \
            or wy.shape != (h, s.shape[1]) or wx.shape != (w, s.shape[2]) \
            or wx_t.shape != wx.shape[::-1]:
        raise InputError(f"a field {s.shape} with spline weights {wy.shape} and {wx.shape} "
                         f"does not match {n} frames of {h}x{w}")
    return wy, wx_t, s


def column_weights32(weights):
    """The spline's column weights transposed, ``(gx, W)`` float32 C-contiguous CuPy (the
    refinement's): kept with :func:`~._spline.field_weights`' own, else made on the host."""
    w32 = getattr(weights, "wx_t32", None)
    return _transposed_on_device(weights, np.float32) if w32 is None else w32


def _transposed_on_device(weights, dtype):
    """``weights[1]`` (``wx``, ``(W, gx)``) transposed on the host as ``dtype``, kept on the
    device (the given weights, not their device copy, which would come back)."""
    return kept_on_device(np.ascontiguousarray(np.asarray(to_numpy(weights[1]), dtype).T))


def add_fields(a, b):
    """``a + b`` of float64 arrays of at most 3 axes that broadcast: the patch pass's small
    per-chunk field sums.  On CuPy a kernel of ours (``add_fields``: three CuPy additions
    would each compile for their own shapes on a first run); the same
    IEEE sums as ``a + b``, which NumPy, other types and other layouts get.

    >>> add_fields(np.ones((2, 1, 2)), np.arange(2.0)).tolist()
    [[[1.0, 2.0]], [[1.0, 2.0]]]
    """
    xp = array_module_of(a, b)
    shape = np.broadcast_shapes(a.shape, b.shape)
    if xp is np or a.dtype != np.float64 or b.dtype != np.float64 or len(shape) > 3:
        return a + b
    views = [xp.broadcast_to(xp.asarray(x), shape) for x in (a, b)]
    steps = [[0] * (3 - len(shape)) + [st // 8 for st in v.strides] for v in views]
    if any(st < 0 or st * 8 != raw for v, vs in zip(views, steps)
           for st, raw in zip(vs[3 - len(shape):], v.strides)):
        return a + b
    full = (1,) * (3 - len(shape)) + tuple(shape)
    out = xp.empty(shape, xp.float64)
    if out.size:
        ADD.get()((stride_blocks(out.size, 256, 1024),), (256,),
                  (views[0], views[1], out, np.int64(full[1]), np.int64(full[2]),
                   np.int64(out.size), *(np.int64(v) for vs in steps for v in vs)))
    return out


def output_array(out, shape):
    """A new float32 CuPy array of ``shape``, or ``out`` (C-contiguous float32 of that shape,
    e.g. a poisoned one in the tests)."""
    import cupy as cp

    if out is None:
        return cp.empty(shape, cp.float32)
    if out.shape != tuple(shape) or out.dtype != cp.float32 or not out.flags.c_contiguous:
        raise InputError(f"out must be a C-contiguous float32 array of shape {tuple(shape)}")
    return out


def check_windows(starts_y, starts_x, size, frame_shape, integer_shifts=None):
    """InputError unless every window of ``size`` at ``starts``, moved by each of the host
    ``integer_shifts`` ``(N, 2)`` (default none), lies inside frames of ``frame_shape`` (the
    kernels read them unchecked)."""
    sy, sx = np.asarray(starts_y, np.int64), np.asarray(starts_x, np.int64)
    s = np.zeros((1, 2), np.int64) if integer_shifts is None or not len(integer_shifts) \
        else np.asarray(integer_shifts, np.int64).reshape(-1, 2)
    if not len(sy) or not len(sx) or sy.min() - s[:, 0].max() < 0 \
            or sx.min() - s[:, 1].max() < 0 \
            or sy.max() + size[0] - s[:, 0].min() > frame_shape[0] \
            or sx.max() + size[1] - s[:, 1].min() > frame_shape[1]:
        raise InputError("a patch window (moved by its frame's shift) leaves the frame")


def gather_windows_gpu(frames, starts_y, starts_x, gx, size, integer_shifts, out=None,
                       device_shifts=None, bound_rows=None):
    """``(P, N, ph, pw)`` float32 CuPy: the windows of ``frames`` ``(N, H, W)`` float32 CuPy at
    ``starts`` moved by ``integer_shifts`` ``(N, 2)`` (host; ``device_shifts``: the same
    int64 on the GPU, else uploaded), one launch (per 65535 frames).

    With ``bound_rows`` (a search of ``-bound_rows..bound_rows``): ``(windows, (s1, s2))``,
    also their summed-area tables ``(P * N, R, pw + 1)`` as
    :func:`~xcorr_app.registration._surfaces.summed_area_tables` of the windows makes them
    with that bound (to float64 rounding: its sums run in another order), made in the same
    pass over the windows (``patch_windows_tables``)."""
    import cupy as cp

    frames = cp.ascontiguousarray(frames, cp.float32)
    n, h, w = frames.shape
    ph, pw = size
    p = len(starts_y) * gx
    shifts = np.asarray(to_numpy(integer_shifts), np.int64).reshape(n, 2)  # host
    if len(starts_x) != gx:
        raise InputError(f"{len(starts_x)} window columns for a grid {gx} patches wide")
    check_windows(starts_y, starts_x, size, (h, w), shifts)
    out = output_array(out, (p, n, ph, pw))
    shift = cp.asarray(shifts) if device_shifts is None else device_shifts
    if shift.shape != (n, 2) or shift.dtype != cp.int64 or not shift.flags.c_contiguous:
        raise InputError(f"device shifts {shift.shape} {shift.dtype} for {n} frames")
    sy, sx = window_starts(starts_y, starts_x)
    # the windows' kernels compile together (one NVRTC call) on first use
    gather, _, with_tables = compile_together([(GATHER, (THREADS,)), (THROUGH, (THREADS,)),
                                               (GATHER_TABLES, (TABLES_THREADS,))])
    if bound_rows is not None:
        top, gap = table_layout(ph, bound_rows)
        tables = tuple(cp.empty((p * n, ph + 1 - gap, pw + 1), cp.float64) for _ in range(2))
        threads = min(TABLES_THREADS, -(-pw // 32) * 32)
    for a in range(0, n, MAX_GRID):
        b = min(n, a + MAX_GRID)
        if bound_rows is None:
            gather((-(-ph // (THREADS // 32)), p, b - a), (THREADS,),  # a warp a window row
                   (frames, out, shift, sy, sx, np.int32(a), np.int32(n), np.int32(h),
                    np.int32(w), np.int32(gx), np.int32(ph), np.int32(pw)))
        else:
            with_tables((p, b - a), (threads,),
                        (frames, out, *tables, shift, sy, sx, np.int32(a), np.int32(n),
                         np.int32(h), np.int32(w), np.int32(gx), np.int32(ph), np.int32(pw),
                         np.int32(top), np.int32(gap)))
    return out if bound_rows is None else (out, tables)


def through_field(frames, starts_y, starts_x, patch_field, weights, max_gx=None):
    """The operands of the kernels that sample windows through the field: the frames as
    C-contiguous float32 CuPy, and :func:`device_weights`; InputError unless the windows'
    starts make the field's grid (at most ``max_gx`` patches wide, where given)."""
    import cupy as cp

    frames = cp.ascontiguousarray(frames, cp.float32)
    wy, wxt, s = device_weights(weights, patch_field, frames)
    gy, gx = s.shape[1:3]
    if (len(starts_y), len(starts_x)) != (gy, gx) or (max_gx is not None and gx > max_gx):
        wide = "" if max_gx is None else f" (at most {max_gx} wide)"
        raise InputError(f"windows of a {len(starts_y)}x{len(starts_x)} grid for a field of "
                         f"{gy}x{gx} patches{wide}")
    return frames, wy, wxt, s


def windows_through_gpu(frames, starts_y, starts_x, size, patch_field, weights, out=None):
    """``(P, N, ph, pw)`` float32 CuPy: the windows at ``starts`` of ``frames`` ``(N, H, W)``
    float32 sampled through the field of ``patch_field`` ``(N, gy, gx, 2)`` (``weights``: the
    spline weights ``(wy, wx)``), by cubic convolution; one launch (per 65535 frames)."""
    frames, wy, wxt, s = through_field(frames, starts_y, starts_x, patch_field, weights)
    n, h, w = frames.shape
    gy, gx = s.shape[1:3]
    ph, pw = size
    p = gy * gx
    check_windows(starts_y, starts_x, size, (h, w))
    out = output_array(out, (p, n, ph, pw))
    sy, sx = window_starts(starts_y, starts_x)
    kernel = THROUGH.get(THREADS)
    for a in range(0, n, MAX_GRID):
        b = min(n, a + MAX_GRID)
        kernel((ph, p, b - a), (THREADS,), (frames, out, wy, wxt, s, sy, sx, np.int32(a),
                                            np.int32(n), np.int32(h), np.int32(w), np.int32(gy),
                                            np.int32(gx), np.int32(ph), np.int32(pw)),
               shared_mem=2 * gx * 8)
    return out


def warp_gpu(frames, patch_field, weights, cubic=False, fill=0.0, box=None, out=None):
    """``(N, y1 - y0, x1 - x0)`` float32 CuPy: every frame of ``frames`` ``(N, H, W)`` (CuPy,
    any real type) warped by its field (``patch_field`` ``(N, gy, gx, 2)``, ``weights``
    ``(wy, wx)``), the output pixels of ``box`` ``(y0, y1, x0, x1)`` (default the frame); one
    launch (per 65535 frames)."""
    import cupy as cp

    frames, c_type = kernel_pixels(frames)
    n, h, w = frames.shape
    y0, y1, x0, x1 = box or (0, h, 0, w)
    if not (0 <= y0 < y1 <= h and 0 <= x0 < x1 <= w):
        raise InputError(f"crop box {box} is not inside the {h}x{w} frame")
    wy, wxt, s = device_weights(weights, patch_field, frames)
    gy, gx = s.shape[1:3]
    finite = None
    if cubic and frames.dtype.kind == "f":  # NaN or Inf pixels: that frame bilinear
        finite = cp.ascontiguousarray(cp.isfinite(frames).all(axis=(1, 2)))
    out = output_array(out, (n, y1 - y0, x1 - x0))
    kernel = WARP.get(c_type, bool(cubic), THREADS, gx if gx in WARP_GX else 0)
    band = max(1, min(WARP_BAND, WARP_COEF // (2 * gx)))
    tiles = -(-(x1 - x0) // THREADS) * -(-(y1 - y0) // band)
    for a in range(0, n, MAX_GRID):
        b = min(n, a + MAX_GRID)
        kernel((tiles, b - a), (THREADS,),  # a thread a column of a tile of `band` rows
               (frames, out, wy, wxt, s,
                finite if finite is not None else out,  # (not read: check_finite 0)
                np.int32(finite is not None), np.int32(a), np.int32(h), np.int32(w),
                np.int32(gy), np.int32(gx),
                np.int32(y0), np.int32(x0), np.int32(y1 - y0), np.int32(x1 - x0),
                np.float32(fill), np.int32(band)),
               shared_mem=band * 2 * gx * 8)
    return out
