"""The resampling of piecewise-rigid registration, one definition on both devices: NumPy here
(the reference) and the kernels of ``cuda/patch_field.cu`` (one launch per chunk each), equal to
float rounding.

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

import functools

import numpy as np

from .._cuda.device import kept_on_device
from .._cuda.launch import stride_blocks
from .._cuda.loader import PIXEL_C_TYPES, KernelFamily, compile_together, kernel_pixels
from ..backend import array_module_of, to_numpy
from ..errors import InputError

SOURCE = "patch_field.cu"
THREADS = 128
GATHER = KernelFamily(SOURCE, "patch_windows", [(THREADS,)])
THROUGH = KernelFamily(SOURCE, "windows_through", [(THREADS,)])
#: grid widths the warp is compiled for (its field's sums unrolled); others: 0 (any width)
WARP_GX = (4, 8)
WARP = KernelFamily(SOURCE, "warp_field", [(t, c, THREADS, g) for t in PIXEL_C_TYPES.values()
                                           for c in (False, True) for g in (0,) + WARP_GX])
FINITE = KernelFamily(SOURCE, "finite_field", [()])
ADD = KernelFamily(SOURCE, "add_fields", [()])
#: the refinement's block: 128 threads, eight blocks an SM (256 and four: 5% slower; bands of 8
#: or 32 rows instead of 16: no better; tools/refine_ab.py, H100 2026-11-23)
REFINE_THREADS = 128
#: grid widths the refinement is compiled for (its field's sums unrolled: at 8x8 5.6 ms a
#: launch of 1024 frames against the any-width kernel's 6.3 ms, tools/refine_ab.py, H200
#: 2026-11-25); others: 0 (any width)
REFINE_GX = (1, 2, 3, 4, 5, 6, 7, 8)
REFINE = KernelFamily("refine_surfaces.cu", "refine_surfaces",
                      [(REFINE_THREADS, g) for g in (0,) + REFINE_GX])
#: the field's row coefficients of a refinement launch's frames, made before it
FIELD_ROWS = KernelFamily("refine_surfaces.cu", "field_rows", [()])
#: the template's side of the refinement (its tapered patches and their sums), per pass
TEMPLATE_THREADS = 256
TEMPLATE = KernelFamily("refine_surfaces.cu", "refine_template", [(TEMPLATE_THREADS,)])
ROWS_THREADS = 128
#: the fused refinement's row coefficients of a strip of window rows (``2 gx`` doubles a row)
#: take at most this many doubles of shared memory (8 KiB; with its static arrays, 12.4 KiB,
#: eight blocks an SM still fit): grids at most half as many patches wide
REFINE_STRIP_DOUBLES = 1024
REFINE_MAX_GX = REFINE_STRIP_DOUBLES // 2
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
    kernel, ``cuda/patch_field.cu``): SciPy multiplies it, so a NaN pixel spread to the outputs
    above and left of it when the field put them on pixels (a zero field)."""
    h, w = image.shape
    f = np.asarray(image, np.float32)
    cy, cx = np.asarray(cy, np.float64), np.asarray(cx, np.float64)
    inside = (cy >= 0) & (cy <= h - 1) & (cx >= 0) & (cx <= w - 1)
    y, x = np.where(inside, cy, 0.0), np.where(inside, cx, 0.0)
    fy, fx = np.floor(y), np.floor(x)
    ty, tx = y - fy, x - fx
    y0, x0 = fy.astype(np.int64), fx.astype(np.int64)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)

    def row(r):  # one row of taps, the right one only where its weight is not 0
        a = f[r, x0].astype(np.float64)
        b = np.where(tx != 0, f[r, x1], 0.0).astype(np.float64)
        return np.where(tx != 0, (1.0 - tx) * a + tx * b, a)

    top = row(y0)
    bottom = np.where(ty != 0, row(y1), 0.0)
    out = np.where(ty != 0, (1.0 - ty) * top + ty * bottom, top)
    return np.where(inside, out, float(fill))


def spline_weights(centres, n):
    """``(n, len(centres))`` float64: the weights that map values at ``centres`` (increasing)
    to pixels ``0..n-1`` by a natural cubic spline, linear beyond the outermost centres.

    Written out (the spline of each unit vector: one small tridiagonal solve) rather than
    :class:`scipy.interpolate.CubicSpline`, whose import (``scipy.interpolate`` with
    ``scipy.special`` and ``scipy.linalg``) took 1.4 s of a 4.1 s first ``xcorr align
    --patches`` run on an H100 host (2026-11-23); the tests compare the two to 1e-12.
    """
    c = np.asarray(centres, np.float64)
    g = len(c)
    x = np.arange(n, dtype=np.float64)
    if g == 1:
        return np.ones((n, 1))
    h = np.diff(c)
    eye = np.eye(g)
    m = np.zeros((g, g))  # second derivatives at the centres (rows) of each unit vector
    if g > 2:  # natural ends: 0 there; inside, the continuity of the slopes
        a = np.zeros((g - 2, g - 2))
        k = np.arange(g - 2)
        a[k, k] = 2.0 * (h[:-1] + h[1:])
        a[k[1:], k[:-1]] = h[1:-1]
        a[k[:-1], k[1:]] = h[1:-1]
        slope = (eye[1:] - eye[:-1]) / h[:, None]
        m[1:-1] = np.linalg.solve(a, 6.0 * (slope[1:] - slope[:-1]))
    j = np.clip(np.searchsorted(c, np.clip(x, c[0], c[-1]), side="right") - 1, 0, g - 2)
    hj = h[j][:, None]
    left = (c[j + 1][:, None] - np.clip(x, c[0], c[-1])[:, None]) / hj  # of the interval
    right = 1.0 - left
    w = left * eye[j] + right * eye[j + 1] + hj ** 2 / 6.0 * (
        (left ** 3 - left) * m[j] + (right ** 3 - right) * m[j + 1])
    d0 = (eye[1] - eye[0]) / h[0] - h[0] * (2.0 * m[0] + m[1]) / 6.0  # slopes at the ends
    d1 = (eye[-1] - eye[-2]) / h[-1] + h[-1] * (m[-2] + 2.0 * m[-1]) / 6.0
    w += np.where(x < c[0], x - c[0], 0.0)[:, None] * d0 + \
        np.where(x > c[-1], x - c[-1], 0.0)[:, None] * d1
    return w


def dense_field(patch_field, centres, frame_shape, weights=None):
    """``(N, 2, H, W)`` float64: the shifts of ``patch_field`` ``(N, gy, gx, 2)`` at every
    pixel, on its device (NaN rows give 0: left unshifted)."""
    xp = array_module_of(patch_field)
    if weights is None:
        weights = field_weights(centres, frame_shape, xp)
    wy, wx = weights
    s = xp.nan_to_num(patch_field.astype(xp.float64), nan=0.0).transpose(0, 3, 1, 2)
    return wy @ s @ wx.T  # (N, 2, gy, gx) -> (N, 2, H, W)


def field_weights(centres, frame_shape, xp):
    """The spline weights of both axes, on ``xp``'s device.  On the GPU the arrays are kept per
    grid and device (read, never written, by the kernels): a run's patch pass otherwise left
    the GPU idle for their making and upload (0.9 ms of a 0.14 s run, H200 2026-11-24)."""
    c = np.asarray(centres, np.float64)
    key = (tuple(c[:, 0, 0].tolist()), tuple(c[0, :, 1].tolist()),
           tuple(int(v) for v in frame_shape))
    if xp is np:
        return tuple(spline_weights(np.asarray(a), n) for a, n in zip(key[:2], key[2]))
    return _device_weights_of(key, xp.cuda.Device().id)


class DeviceWeights(tuple):
    """The spline weights ``(wy, wx)`` as CuPy arrays of one device (a tuple of the two), with
    ``wx_t``: ``wx`` transposed, C-contiguous ``(gx, W)``, the layout the kernels read (a
    warp's lanes, consecutive columns, read consecutive doubles: ``along_row`` in
    ``field_sample.cuh``)."""

    def __new__(cls, wy, wx, wx_t):
        self = super().__new__(cls, (wy, wx))
        self.wx_t = wx_t
        return self


@functools.lru_cache(maxsize=16)
def _device_weights_of(key, device_id):
    import cupy as cp

    with cp.cuda.Device(device_id):
        wy, wx = (spline_weights(np.asarray(a), n) for a, n in zip(key[:2], key[2]))
        return DeviceWeights(cp.asarray(wy), cp.asarray(wx),
                             cp.asarray(np.ascontiguousarray(wx.T)))


def _starts(starts_y, starts_x):
    """The windows' starts as int32 CuPy arrays, uploaded once per grid and device."""
    return tuple(kept_on_device(np.asarray(v, np.int32)) for v in (starts_y, starts_x))


def _device_weights(weights, s, frames):
    """``(wy, wx_t, s)``: the spline weights (``wx`` transposed, ``(gx, W)``: the layout the
    kernels read) and the patch field as C-contiguous float64 CuPy arrays (NaN: 0, as
    ``nan_to_num``: ``finite_field`` in ``patch_field.cu``), checked against each other and the
    frames (the kernels index them unchecked)."""
    import cupy as cp

    wy, wx = (cp.ascontiguousarray(cp.asarray(a, cp.float64)) for a in weights)
    wx_t = getattr(weights, "wx_t", None)
    if wx_t is None:  # (weights not of field_weights: transposed on the host, once a call)
        wx_t = kept_on_device(np.ascontiguousarray(to_numpy(wx).T))
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


def add_fields(a, b):
    """``a + b`` of float64 arrays of at most 3 axes that broadcast: the patch pass's small
    per-chunk field sums.  On CuPy a kernel of ours (``add_fields``: three CuPy additions,
    each compiled for its own shapes, took 0.33 s of a first run, H100 2026-11-23); the same
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


def _output(out, shape):
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
                       device_shifts=None):
    """``(P, N, ph, pw)`` float32 CuPy: the windows of ``frames`` ``(N, H, W)`` float32 CuPy at
    ``starts`` moved by ``integer_shifts`` ``(N, 2)`` (host; ``device_shifts``: the same
    int64 on the GPU, else uploaded), one launch (per 65535 frames)."""
    import cupy as cp

    frames = cp.ascontiguousarray(frames, cp.float32)
    n, h, w = frames.shape
    ph, pw = size
    p = len(starts_y) * gx
    shifts = np.asarray(to_numpy(integer_shifts), np.int64).reshape(n, 2)  # host
    if len(starts_x) != gx:
        raise InputError(f"{len(starts_x)} window columns for a grid {gx} patches wide")
    check_windows(starts_y, starts_x, size, (h, w), shifts)
    out = _output(out, (p, n, ph, pw))
    shift = cp.asarray(shifts) if device_shifts is None else device_shifts
    if shift.shape != (n, 2) or shift.dtype != cp.int64 or not shift.flags.c_contiguous:
        raise InputError(f"device shifts {shift.shape} {shift.dtype} for {n} frames")
    sy, sx = _starts(starts_y, starts_x)
    # the windows' two kernels compile together (one NVRTC call) on first use
    kernel = compile_together([(GATHER, (THREADS,)), (THROUGH, (THREADS,))])[0]
    for a in range(0, n, MAX_GRID):
        b = min(n, a + MAX_GRID)
        kernel((-(-ph // (THREADS // 32)), p, b - a), (THREADS,),  # a warp a window row
               (frames, out, shift, sy, sx, np.int32(a), np.int32(n), np.int32(h),
                np.int32(w), np.int32(gx), np.int32(ph), np.int32(pw)))
    return out


def _through_field(frames, starts_y, starts_x, patch_field, weights, max_gx=None):
    """The operands of the kernels that sample windows through the field: the frames as
    C-contiguous float32 CuPy, and :func:`_device_weights`; InputError unless the windows'
    starts make the field's grid (at most ``max_gx`` patches wide, where given)."""
    import cupy as cp

    frames = cp.ascontiguousarray(frames, cp.float32)
    wy, wxt, s = _device_weights(weights, patch_field, frames)
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
    frames, wy, wxt, s = _through_field(frames, starts_y, starts_x, patch_field, weights)
    n, h, w = frames.shape
    gy, gx = s.shape[1:3]
    ph, pw = size
    p = gy * gx
    check_windows(starts_y, starts_x, size, (h, w))
    out = _output(out, (p, n, ph, pw))
    sy, sx = _starts(starts_y, starts_x)
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
    wy, wxt, s = _device_weights(weights, patch_field, frames)
    gy, gx = s.shape[1:3]
    finite = None
    if cubic and frames.dtype.kind == "f":  # NaN or Inf pixels: that frame bilinear
        finite = cp.ascontiguousarray(cp.isfinite(frames).all(axis=(1, 2)))
    out = _output(out, (n, y1 - y0, x1 - x0))
    kernel = WARP.get(c_type, bool(cubic), THREADS, gx if gx in WARP_GX else 0)
    for a in range(0, n, MAX_GRID):
        b = min(n, a + MAX_GRID)
        kernel((-(-(y1 - y0) // (THREADS // 32)), b - a), (THREADS,),  # a warp a row
               (frames, out, wy, wxt, s,
                finite if finite is not None else out,  # (not read: check_finite 0)
                np.int32(finite is not None), np.int32(a), np.int32(h), np.int32(w),
                np.int32(gy), np.int32(gx),
                np.int32(y0), np.int32(x0), np.int32(y1 - y0), np.int32(x1 - x0),
                np.float32(fill)),
               shared_mem=THREADS // 32 * 2 * gx * 8)
    return out


def refine_template_gpu(tpatches, taper, apply_taper=True):
    """The template's side of :func:`refine_surfaces_gpu`, made on the device in one launch
    (``refine_template`` of ``cuda/refine_surfaces.cu``): ``(tnear, (mean, var, bad), tp)``.

    ``tnear``: the template patches ``tpatches`` ``(P, ph, pw)`` (CuPy) as
    :func:`~._patches.tapered` makes them with ``taper`` (with ``apply_taper`` False, or
    ``taper`` None: as they are); ``mean, var, bad``: ``(P, 3, 3)`` float64, float64, bool,
    :func:`~xcorr_app.registration._normalize.zncc_left` of ``tnear`` for a search of +-1 px
    (equal to float64 rounding); ``tp``: ``taper`` ``(ph, pw)`` as a float32 CuPy array, kept
    per taper and device (None stays None).  Nothing waits for the device."""
    import cupy as cp

    tpl = cp.ascontiguousarray(tpatches, cp.float32)
    if tpl.ndim != 3 or 0 in tpl.shape:
        raise InputError(f"template patches must be a non-empty (P, ph, pw) array, got "
                         f"shape {tpl.shape}")
    p, ph, pw = tpl.shape
    tp = None
    if taper is not None:
        t = np.ascontiguousarray(to_numpy(taper), np.float32)
        if t.shape != (ph, pw):
            raise InputError(f"the taper {t.shape} does not match patches of {ph}x{pw}")
        tp = kept_on_device(t)
    use = apply_taper and tp is not None
    tnear = cp.empty_like(tpl)
    mean, var = cp.empty((p, 3, 3), cp.float64), cp.empty((p, 3, 3), cp.float64)
    bad = cp.empty((p, 3, 3), cp.bool_)
    TEMPLATE.get(TEMPLATE_THREADS)((p,), (TEMPLATE_THREADS,),
                                   (tpl, tp if use else tpl, np.int32(use), tnear, mean, var,
                                    bad, np.int32(ph), np.int32(pw)))
    return (tnear if use else tpl), (mean, var, bad), tp


def refine_surfaces_gpu(frames, starts_y, starts_x, size, patch_field, weights, taper, tpatches,
                        left, out=None, surfaces=None):
    """The refinement of the patch pass in one launch (per 65535 frames): every window of
    ``frames`` ``(N, H, W)`` float32 CuPy sampled through the field (as
    :func:`windows_through_gpu`, written to ``out`` ``(P, N, ph, pw)``), less its mean and
    times ``taper`` (``(ph, pw)`` float32 CuPy, or None: as is), its ZNCC surface
    ``(P * N, 3, 3)`` float32 against ``tpatches`` ``(P, ph, pw)`` within +-1 px and the
    surface's first maximum ``iy, ix`` (int64).  ``left``: ``(mean, var, bad)`` of
    :func:`refine_template_gpu`.  Grids wider than :data:`REFINE_MAX_GX` patches: InputError
    (the caller measures them unfused).  ``surfaces``: ``(z, iy, ix)`` to write into (e.g.
    poisoned ones in the tests), else new arrays."""
    import cupy as cp

    frames, wy, wxt, s = _through_field(frames, starts_y, starts_x, patch_field, weights,
                                       REFINE_MAX_GX)
    n, h, w = frames.shape
    gy, gx = s.shape[1:3]
    ph, pw = size
    p = gy * gx
    tpl = cp.ascontiguousarray(tpatches, cp.float32)
    lmean, lvar, lbad = left
    typed = zip((lmean, lvar, lbad, taper), (cp.float64, cp.float64, cp.bool_, cp.float32))
    if tpl.shape != (p, ph, pw) or any(a.size != p * 9 for a in left) \
            or (taper is not None and taper.shape != (ph, pw)) \
            or any(a is not None and not (isinstance(a, cp.ndarray) and a.dtype == t
                                          and a.flags.c_contiguous) for a, t in typed):
        raise InputError(f"template patches {tpl.shape}, their sums and taper do not match "
                         f"{p} windows of {ph}x{pw} (C-contiguous CuPy arrays: float64 mean "
                         f"and variance, bool flags, float32 taper)")
    check_windows(starts_y, starts_x, size, (h, w))
    out = _output(out, (p, n, ph, pw))
    if surfaces is None:
        z = cp.empty((p * n, 3, 3), cp.float32)
        iy, ix = cp.empty(p * n, cp.int64), cp.empty(p * n, cp.int64)
    else:
        z, iy, ix = surfaces
        if z.shape != (p * n, 3, 3) or z.dtype != cp.float32 or not z.flags.c_contiguous \
                or any(i.shape != (p * n,) or i.dtype != cp.int64 or not i.flags.c_contiguous
                       for i in (iy, ix)):
            raise InputError(f"surfaces must be C-contiguous float32 ({p * n}, 3, 3) and two "
                             f"int64 ({p * n},) arrays")
    sy, sx = _starts(starts_y, starts_x)
    args = (REFINE_THREADS, gx if gx in REFINE_GX else 0)
    kernel, rows_kernel = compile_together([(REFINE, args), (FIELD_ROWS, ())])
    rows = cp.empty((min(n, MAX_GRID), h, 2 * gx), cp.float64)
    # the window's rows in strips of equal height, each strip's coefficients in shared memory
    most = REFINE_STRIP_DOUBLES // (2 * gx)
    strip = -(-ph // -(-ph // most))
    for a in range(0, n, MAX_GRID):
        b = min(n, a + MAX_GRID)
        rows_kernel((-(-(h * 2 * gx) // ROWS_THREADS), b - a), (ROWS_THREADS,),
                    (wy, s, rows, np.int32(a), np.int32(h), np.int32(gy), np.int32(gx)))
        kernel((p, b - a), (REFINE_THREADS,),
               (frames, out, rows, wxt, sy, sx, taper if taper is not None else out,
                np.int32(taper is not None), tpl, lmean, lvar, lbad, z, iy, ix, np.int32(a),
                np.int32(n), np.int32(h), np.int32(w), np.int32(gx), np.int32(ph),
                np.int32(pw), np.int32(strip)), shared_mem=strip * 2 * gx * 8)
    return z, iy, ix
