"""GPU launchers of ``kernels/alignment/frame_stats.cu``: the float32 copy of a chunk with each
frame's mean, NaN/Inf and constant flags, and the subtraction of the means, for :func:`prepare
<xcorr_app.alignment.rigid._preprocess.prepare>`.

The same work as a few CuPy operations (``astype``, ``isfinite(...).all``, ``(f == f0).all``,
``sum``, ``-``), which on a fresh machine each compile a kernel on first use, seconds before a
first run measured anything (docs/how-align-works.md, measurements).  These kernels (and
:func:`pack_rows`) compile together in one call (:func:`xcorr_app._cuda.loader.compile_together`), and give the same numbers: the mean
is summed in double row by row and then over the rows, in a fixed order.

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> f, mean, finite, constant = converted_stats(cp.ones((2, 3, 5), cp.uint16))  # doctest: +SKIP
>>> mean.tolist(), finite.tolist(), constant.tolist()  # doctest: +SKIP
([1.0, 1.0], [True, True], [True, True])
"""

from __future__ import annotations

import functools

import numpy as np

from ..._cuda import (KernelFamily, PIXEL_C_TYPES, compile_together, kernel_pixels, stride_blocks,
                      upload_shared)
from ...errors import InputError

SOURCE = "frame_stats.cu"
THREADS = 256
ROW_STATS = KernelFamily(SOURCE, "frame_row_stats",
                         [(t, w, THREADS) for t in PIXEL_C_TYPES.values() for w in (True, False)])
FRAME_TOTALS = KernelFamily(SOURCE, "frame_totals", [(THREADS,)])
SUBTRACT = KernelFamily(SOURCE, "subtract_frame_means", [()])
CONVERT_SUBTRACT = KernelFamily(SOURCE, "convert_subtract",
                                [(t,) for t in PIXEL_C_TYPES.values()])
PACK_ROWS = KernelFamily(SOURCE, "pack_rows", [()])
PRECISION = KernelFamily(SOURCE, "precision_sums", [(THREADS,)])
POWER_OF_TWO = KernelFamily(SOURCE, "scale_by_power_of_two", [("float",), ("double",)])
AREA_FLOAT = KernelFamily(SOURCE, "area_float", [(t, THREADS) for t in PIXEL_C_TYPES.values()])
#: pack_rows' pieces: their widths, and the type codes of the source
ROW_WIDTHS = (2, 1, 1, 1, 1, 2, 2, 1)
ROW_CODES = {np.dtype(np.float64): 0, np.dtype(np.bool_): 1, np.dtype(np.float32): 2,
             np.dtype(np.int64): 3}
#: blocks of the grid-stride row packing (enough to fill any current GPU)
PACK_BLOCKS = 1024
#: blocks a frame of the subtraction (each thread then takes every 64 * THREADS-th pixel)
SUBTRACT_FRAME_BLOCKS = 64
MAX_GRID_Y = 65535


def _kernels(c_type=None, write=True):
    """(row stats of float32 without writing, totals, subtraction, row packing, precision
    sums[, row stats of ``c_type`` (writing float32 with ``write``)[, its conversion less the
    means without ``write``]]), compiled together where not compiled yet."""
    extra = [] if c_type is None else [(ROW_STATS, (c_type, write, THREADS))] \
        + [(CONVERT_SUBTRACT, (c_type,))] * (not write)
    return compile_together([(ROW_STATS, ("float", False, THREADS)), (FRAME_TOTALS, (THREADS,)),
                             (SUBTRACT, ()), (PACK_ROWS, ()), (PRECISION, (THREADS,))] + extra)


def _stats(f, out, c_type, write, weights=None):
    """``(mean, finite, constant)`` of the frames ``f`` (pixels of ``c_type``), their float32
    copy written to ``out`` with ``write``; with ``weights`` (:func:`filtered_mean_weights`)
    also the mean their :func:`demeaned` frames will have once filtered (else None)."""
    import cupy as cp

    n, h, w = f.shape
    out = f if out is None else out  # (not written without ``write``)
    kernels = _kernels(c_type, write)
    row, totals = kernels[5], kernels[1]
    row_sum = cp.empty((n, h), cp.float64)
    row_flags = cp.empty((n, h), cp.int32)
    mean = cp.empty(n, cp.float32)
    finite = cp.empty(n, cp.bool_)
    constant = cp.empty(n, cp.bool_)
    if weights is None:  # (the kernels read none of these then)
        wy = wx = row_wsum = row_sum
        wtotal, fmean = 0.0, mean
    else:
        wy, wx, wtotal = weights
        row_wsum, fmean = cp.empty((n, h), cp.float64), cp.empty(n, cp.float32)
    weighted = np.int32(weights is not None)
    for a in range(0, n, MAX_GRID_Y):  # the grid's y extent is at most 65535 frames
        b = min(n, a + MAX_GRID_Y)
        row((-(-h // (THREADS // 32)), b - a), (THREADS,),  # a warp a row
            (f[a:b], out[a:b], row_sum[a:b], row_flags[a:b], wx, row_wsum[a:b], weighted,
             np.int32(h), np.int32(w)))
    if n:
        totals((n,), (THREADS,), (row_sum, row_flags, np.int32(h), np.float64(h * w), mean,
                                  finite, constant, wy, row_wsum, weighted,
                                  np.float64(wtotal), fmean))
    return mean, finite, constant, None if weights is None else fmean


def filtered_mean_weights(taps, shape):
    """What :func:`demeaned` needs to give the mean of its frames (``shape`` ``(H, W)``) once
    filtered by the separable filter of ``taps`` along both axes in mode ``reflect`` (the
    preparation's gaussian prefilter): ``(wy, wx, total)``, the weight each row and column
    carries into the filter's output (the taps that land on it, boundary mapped; float64 CuPy,
    kept per taps, shape and device) and the product of their sums.  Sum over the frame of
    ``wy[y] wx[x] f[y, x]`` is the sum of the filtered frame (up to float rounding)."""
    import cupy as cp

    key = (tuple(float(t) for t in np.asarray(taps, np.float32)), tuple(int(v) for v in shape))
    return _weights_on_device(key, cp.cuda.Device().id)


@functools.lru_cache(maxsize=16)
def _weights_on_device(key, device_id):
    import cupy as cp

    taps, (h, w) = key
    wy, wx = reflect_weights(taps, h), reflect_weights(taps, w)
    with cp.cuda.Device(device_id):
        return upload_shared(wy), upload_shared(wx), float(wy.sum() * wx.sum())


def reflect_weights(taps, n):
    """``(n,)`` float64: the total weight each sample of a line of ``n`` carries into its
    correlation with ``taps`` (odd, centred) in ``scipy.ndimage``'s mode ``reflect``: the taps
    landing on it, each index mapped as ``boundary.cuh``'s ``boundary_index`` (period ``2n``,
    ``d c b a | a b c d | d c b a``).

    >>> [float(v) for v in reflect_weights((0.25, 0.5, 0.25), 4)]
    [1.0, 1.0, 1.0, 1.0]
    >>> [float(v) for v in reflect_weights((0.0, 0.0, 1.0), 3)]  # f[x + 1]: the last twice
    [0.0, 1.0, 2.0]
    """
    taps = np.asarray(taps, np.float64)
    r = len(taps) // 2
    i = (np.arange(n)[:, None] + np.arange(len(taps))[None, :] - r) % (2 * n)
    mapped = np.where(i < n, i, 2 * n - 1 - i)
    out = np.zeros(n)
    np.add.at(out, mapped.ravel(), np.broadcast_to(taps, mapped.shape).ravel())
    return out


def converted_stats(frames):
    """``(f, mean, finite, constant)`` of an ``(N, H, W)`` CuPy chunk: ``f`` its float32 copy (a
    new array), ``mean`` (N,) float32 each frame's mean, ``finite`` and ``constant`` (N,) bool:
    no NaN or Inf pixel, every pixel equal to the first."""
    import cupy as cp

    frames = cp.ascontiguousarray(frames)
    c_type = PIXEL_C_TYPES.get(frames.dtype)
    if c_type is None:  # float16: converted by CuPy, then measured as float32
        f = frames.astype(cp.float32)
        return (f,) + _stats(f, f, "float", False)[:3]
    f = cp.empty(frames.shape, cp.float32)
    return (f,) + _stats(frames, f, c_type, True)[:3]


def frame_stats(frames):
    """``(mean, finite, constant)`` (N,) float32, bool, bool of an ``(N, H, W)`` CuPy chunk, as
    :func:`converted_stats` gives them, without a copy of the pixels (the mean: float64 sums of
    the float32 values, rounded to float32)."""
    frames, c_type = kernel_pixels(frames)  # (float16: converted, then as float32)
    return _stats(frames, None, c_type, False)[:3]


def demeaned(frames, weights=None):
    """``(raw, mean, finite, constant, fmean)`` of an ``(N, H, W)`` CuPy chunk: ``raw`` its
    float32 copy less each frame's mean (a new array; the numbers of :func:`converted_stats`
    and then :func:`subtract_means`), the rest as :func:`converted_stats` gives them; with
    ``weights`` (:func:`filtered_mean_weights`) ``fmean`` (N,) float32, the mean of ``raw``
    once filtered (else None).  The statistics are read from the pixels as they are, then the
    copy is written less the means in one pass (rather than written, read and written
    again)."""
    import cupy as cp

    frames, c_type = kernel_pixels(frames)  # (float16: converted, then as float32)
    mean, finite, constant, fmean = _stats(frames, None, c_type, False, weights)
    n, h, w = frames.shape
    raw = cp.empty(frames.shape, cp.float32)
    if n and h * w:
        _each_frame(_kernels(c_type, False)[6], h * w, n,
                    lambda a: (frames, raw, mean, np.int64(h * w), np.int64(a)))
    return raw, mean, finite, constant, fmean


def frame_means(f):
    """Each frame's mean of a float32 C-contiguous ``(N, H, W)`` CuPy array, (N,) float32."""
    return _stats(f, f, "float", False)[0]


def subtract_means(f, mean):
    """``f[n] -= mean[n]`` in place for a float32 C-contiguous ``(N, H, W)`` CuPy array."""
    n, h, w = f.shape
    if n and h * w:
        _each_frame(_kernels()[2], h * w, n, lambda a: (f, mean, np.int64(h * w), np.int64(a)))
    return f


def area_float(frames, area=None):
    """The ``area`` ``(y0, y1, x0, x1)`` (None: the whole frame) of CuPy ``frames`` (n, h, w)
    as float32 (n, y1 - y0, x1 - x0), C-contiguous, by one kernel (``astype`` and
    ``ascontiguousarray`` of a slice compile a kernel per type and layout at first use)."""
    import cupy as cp

    frames, c_type = kernel_pixels(frames)
    n, h, w = frames.shape
    y0, y1, x0, x1 = area or (0, h, 0, w)
    out = cp.empty((n, y1 - y0, x1 - x0), cp.float32)
    if out.size:
        AREA_FLOAT.get(c_type, THREADS)(
            (stride_blocks(out.size, THREADS),), (THREADS,),
            (frames, np.int64(n), np.int32(h), np.int32(w), np.int32(y0), np.int32(x0),
             np.int32(y1 - y0), np.int32(x1 - x0), out))
    return out


def power_of_two_scaled(frames, peak):
    """A new C-contiguous copy of float32 or float64 CuPy ``frames`` (N, H, W), each frame
    times the power of two that brings its largest magnitude ``peak`` (N,) float64 into
    ``[0.5, 1)`` (1 where it is not finite or 0): :func:`~._preprocess.scale_free`'s scale."""
    import cupy as cp

    frames = cp.ascontiguousarray(frames)
    n, h, w = frames.shape
    out = cp.empty_like(frames)
    peak = cp.ascontiguousarray(peak, cp.float64)
    kernel = POWER_OF_TWO.get(PIXEL_C_TYPES[np.dtype(frames.dtype)])
    if n and h * w:
        _each_frame(kernel, h * w, n, lambda a: (frames, out, peak, np.int64(h * w), np.int64(a)))
    return out


def _each_frame(kernel, plane, n, args):
    """``kernel`` over every pixel of ``n`` frames of ``plane`` pixels: a frame's blocks along
    x, the frames along y (up to 65535 a launch; ``args(first frame)`` its arguments)."""
    blocks = min(SUBTRACT_FRAME_BLOCKS, -(-plane // THREADS))  # a frame's blocks
    for a in range(0, n, MAX_GRID_Y):
        kernel((blocks, min(n, a + MAX_GRID_Y) - a), (THREADS,), args(a))


def pack_rows(pieces, n):
    """The ``(n, 11)`` float64 result rows of the measuring pass from its eight pieces ``(s, peak,
    confidence, constant, finite, fft_shifts, fft_integer, border)`` (CuPy arrays of widths
    :data:`ROW_WIDTHS`; ``None`` for absent ones, NaN) in one kernel; None where a piece is of
    another type, shape or layout (the caller concatenates then)."""
    import cupy as cp

    codes, args = 0, []
    out = cp.empty((n, sum(ROW_WIDTHS)), cp.float64)
    for j, (piece, width) in enumerate(zip(pieces, ROW_WIDTHS)):
        if piece is None:
            code, piece = 7, out
        else:
            code = ROW_CODES.get(np.dtype(piece.dtype))
            if code is None or piece.size != n * width or not piece.flags.c_contiguous:
                return None
        codes |= code << (3 * j)
        args.append(piece)
    if n:
        _kernels()[3]((stride_blocks(n, THREADS, PACK_BLOCKS),), (THREADS,),
                      (*args, np.int32(codes), np.int64(n), out))
    return out


def precision_sums(f, smooth, out=None):
    """Per row of every frame, ``(N, H, 3)`` float64 CuPy: the sum of the absolute 3x3
    Laplacian (Immerkaer's difference kernel; 0 on the edge rows), of the squared gradient of
    ``smooth`` (``np.gradient``'s differences) and the count of NaN or Inf pixels of ``f``:
    what the predicted precision of ``lucas_kanade="auto"`` adds up
    (:func:`xcorr_app.alignment.refine._lk_decision.precision_from_sums`).  ``f`` and ``smooth``:
    float32 C-contiguous ``(N, H, W)`` CuPy arrays, ``H, W >= 3``; ``out``: where to write."""
    import cupy as cp

    n, h, w = f.shape
    if smooth.shape != f.shape or min(h, w) < 3 \
            or any(a.dtype != cp.float32 or not a.flags.c_contiguous for a in (f, smooth)):
        raise InputError(f"precision_sums needs two float32 C-contiguous arrays of one shape, "
                         f"frames at least 3x3; got {f.shape} {f.dtype}, {smooth.shape} "
                         f"{smooth.dtype}")
    out = cp.empty((n, h, 3), cp.float64) if out is None else out
    if out.shape != (n, h, 3) or out.dtype != cp.float64 or not out.flags.c_contiguous:
        raise InputError(f"out must be a C-contiguous float64 array of shape {(n, h, 3)}")
    kernel = _kernels()[4]
    for a in range(0, n, MAX_GRID_Y):
        b = min(n, a + MAX_GRID_Y)
        kernel((h, b - a), (THREADS,), (f[a:b], smooth[a:b], out[a:b], np.int32(h),
                                        np.int32(w)))
    return out
