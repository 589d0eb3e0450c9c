"""GPU launchers of ``kernels/registration/zncc_peaks.cu``: ZNCC surfaces and their peaks in few
passes, and :class:`GpuSurfaces`, the GPU measurement of the align pipeline.

The CPU (and reference) definitions are :func:`xcorr_app.registration._normalize.zncc` and
:func:`xcorr_app.registration._peaks.find_shifts`; on the GPU, for a batch of frames against one reference (or
one each, or batched: ``L`` references, each against its own run of frames, as the patch pass
of :mod:`xcorr_app.alignment.piecewise._patches` measures its patches), the same results come from

1. :func:`summed_area_tables` of the frames and of their squares (float64: each row's sums
   left of every 32-column strip, then one pass writing the tables);
2. :func:`surface_peaks`: one pass that turns raw correlation sums into ZNCC from eight table
   look-ups per shift, writes the surface and reduces its maximum (first in row-major order)
   and minimum per frame; with ``circular`` the sums are read straight from an un-cropped
   circular FFT correlation; then one pass for the second peak of the confidence measure.

For ZNCC (or mean-subtracted sums) against one reference, :class:`GpuSurfaces` makes what
depends only on the reference once per run: its summed-area tables and, for the FFT plan, its
zero-padded spectrum.  Per batch of frames: their summed-area tables, the correlation (the
planner's kernel, or the FFT home's padded spectra (:mod:`xcorr_app.correlate._fft`) and,
for a narrow search whose shifts all overlap, the correlation at its window of shifts alone
(:mod:`xcorr_app.correlate._fft_window`), else the in-place conjugate product and one
``irfft2``, left un-cropped: :func:`surface_peaks` reads the circular result), and
:func:`surface_peaks`.

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> a = cp.random.default_rng(0).random((2, 40, 50), dtype=cp.float32)  # doctest: +SKIP
>>> s1, s2 = summed_area_tables(a)  # doctest: +SKIP
>>> bool(cp.isclose(s1[0, -1, -1], a[0].sum(dtype=cp.float64)))  # doctest: +SKIP
True
>>> from xcorr_app.correlate._plans import Plan  # doctest: +SKIP
>>> frames = cp.random.default_rng(0).random((3, 64, 80), dtype=cp.float32)  # doctest: +SKIP
>>> g = GpuSurfaces((64, 80), (32, 40), "zncc")  # doctest: +SKIP
>>> z, iy, ix, peak, conf = g(frames[0], frames, Plan("fft"), None)  # doctest: +SKIP
>>> (iy - 32).tolist(), (ix - 40).tolist()  # doctest: +SKIP
([0, 0, 0], [0, 0, 0])
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from .._cuda import KernelFamily
from ..correlate import (conj_product, correlation_window, fft_geometry, first_shift,
                         irfftn_unnormalized, padded_spectra, window_applies)

#: the row segments of a ``sat_tables`` block (32 columns x SEGMENTS warps): :func:`sat_segments`
SAT_SEGMENTS = (8, 16, 32)
#: at most this many rows a thread before a frame's columns take more segments (the fastest
#: per frame height measured: docs/kernels.md, ZNCC and peaks)
SEGMENT_ROWS = 32
WARPS = 8
THREADS = 256
#: the threads of a block for surfaces at most this wide (one warp a surface row: the patch
#: pass's 3- and 9-wide surfaces would leave 247 of 256 threads idle)
NARROW = 32
SOURCE = "zncc_peaks.cu"
#: the most frames one launch takes (the grid's y dimension; larger batches: several launches)
MAX_GRID_Y = 65535
STRIP_SUMS = KernelFamily(SOURCE, "strip_sums", [(WARPS,)])
SAT_TABLES = KernelFamily(SOURCE, "sat_tables", [(s,) for s in SAT_SEGMENTS])
ZNCC_PEAKS = KernelFamily(SOURCE, "zncc_peaks", [(c, n, t) for c in (False, True)
                                                  for n in (False, True)
                                                  for t in (THREADS, NARROW)])
SURFACE_EXTREMA = KernelFamily(SOURCE, "surface_extrema", [(t,) for t in (THREADS, NARROW)])
SECOND_PEAKS = KernelFamily(SOURCE, "second_peaks", [(t,) for t in (THREADS, NARROW)])
DECODE_PEAKS = KernelFamily(SOURCE, "decode_peaks", [()])
#: every kernel of the source, compiled together on first use (one NVRTC call instead of one
#: per kernel: a first run's compilations are mostly NVRTC's fixed cost)
_ALL = ([(STRIP_SUMS, (WARPS,))] + [(SAT_TABLES, (s,)) for s in SAT_SEGMENTS]
        + [(fam, args) for fam in (ZNCC_PEAKS, SURFACE_EXTREMA, SECOND_PEAKS)
           for args in fam.instantiations]
        + [(DECODE_PEAKS, ())])


#: surface rows a ``surface_extrema`` block covers, a warp a row at a time (one reduction and
#: one atomic per block), keeping at least about this many blocks a launch
BLOCKS_WANTED = 4096
#: ... and at most this many rows a warp.  (zncc_peaks and second_peaks keep a block a row: the
#: same layout made them several times slower on large frames, where a block's rows spread the
#: blocks in flight over many frames' tables and surfaces)
ROWS_PER_WARP = 4


def block_rows(threads, ho, count):
    """Surface rows a ``surface_extrema`` block of ``threads`` covers in ``count`` surfaces of
    ``ho`` rows.

    >>> block_rows(256, 1025, 64), block_rows(256, 1025, 1), block_rows(32, 9, 4096)
    (16, 8, 4)
    """
    warps = threads // 32
    return warps * max(1, min(ROWS_PER_WARP, ho * count // (warps * BLOCKS_WANTED)))


def _kernel(family, *args):
    """The compiled kernel (the whole source compiled together on first use)."""
    return family.get(*args, together=_ALL)


def _tables_out(out, shape, cp):
    if out is None:
        return cp.empty(shape, cp.float64), cp.empty(shape, cp.float64)
    for t in out:
        if t.shape != shape or t.dtype != np.float64 or not t.flags.c_contiguous:
            raise InputError(f"summed-area tables must be C-contiguous float64 {shape}")
    return out


def sat_segments(h) -> int:
    """The row segments of ``sat_tables``' blocks for frames of ``h`` rows: the fewest of
    :data:`SAT_SEGMENTS` that leave at most :data:`SEGMENT_ROWS` rows a thread (32 for tall
    frames).  A block adds its segments' sums in a loop over the segments above each one, so
    short frames (the patch pass's windows) with 32 segments of 5 rows spent more on that loop
    than on their rows.

    >>> sat_segments(145), sat_segments(256), sat_segments(512), sat_segments(2048)
    (8, 8, 16, 32)
    """
    for s in SAT_SEGMENTS:
        if h <= s * SEGMENT_ROWS:
            return s
    return SAT_SEGMENTS[-1]


def table_layout(h, bound_rows=None):
    """``(top, gap)`` of tables that keep the rows a search of ``-bound_rows..bound_rows``
    looks up (``y <= top`` and ``y >= top + 1 + gap``); all ``H + 1`` rows without a bound or
    when the two bands meet."""
    if bound_rows is None or 2 * (bound_rows + 1) >= h + 1:
        return h, 0
    return int(bound_rows), h - 2 * int(bound_rows) - 1


def summed_area_tables(frames, out=None, bound_rows=None):
    """Summed-area tables of ``frames`` and of ``frames**2``.

    Parameters
    ----------
    frames : (N, H, W) CuPy array
        Converted to float32 if needed.
    out : pair of (N, R, W + 1) float64 CuPy arrays, optional
    bound_rows : int, optional
        Keep only the rows a search of ``-bound_rows..bound_rows`` needs
        (:func:`table_layout`): the ``bound_rows + 1`` first and last.

    Returns
    -------
    s1, s2 : (N, R, W + 1) float64 CuPy arrays
        ``s1[f, j, x] = frames[f, :y, :x].sum()`` for the table row ``j`` of image row ``y``
        (``R = H + 1`` and ``j = y`` without ``bound_rows``), and the same for the squares
        (first row and column zero).
    """
    import cupy as cp

    x = cp.ascontiguousarray(frames, dtype=cp.float32)
    n, h, w = x.shape
    top, gap = table_layout(h, bound_rows)
    segments = sat_segments(h)
    s1, s2 = _tables_out(out, (n, h + 1 - gap, w + 1), cp)
    if n == 0:
        return s1, s2
    strips = -(-w // 32)
    left1, left2 = cp.empty((n, h, strips), cp.float64), cp.empty((n, h, strips), cp.float64)
    for f0 in range(0, n, MAX_GRID_Y):  # (slices of C-contiguous arrays: contiguous views)
        f1 = min(n, f0 + MAX_GRID_Y)
        rows = (f1 - f0) * h
        if rows:  # (frames of no rows: sat_tables writes their one zero row alone)
            _kernel(STRIP_SUMS, WARPS)((-(-rows // WARPS),), (32 * WARPS,),
                                       (x[f0:f1], left1[f0:f1], left2[f0:f1], np.int32(rows),
                                        np.int32(w), np.int32(strips)))
        _kernel(SAT_TABLES, segments)((strips, f1 - f0), (32, segments),
                                      (x[f0:f1], left1[f0:f1], left2[f0:f1], s1[f0:f1],
                                       s2[f0:f1], np.int32(h), np.int32(w), np.int32(top),
                                       np.int32(gap), np.int32(strips)))
    return s1, s2


def surface_peaks(corr, frame_shape=None, first_shift=None, surface_shape=None, *,
                  left_tables=None, right_tables=None, circular=False, normalize=True,
                  min_overlap=0.25, exclusion=2, out=None):
    """Surfaces (ZNCC or raw) with their integer peaks, peak values and confidences.

    Parameters
    ----------
    corr : (N, Ho, Wo) float32 CuPy array, or (N, FH, FW) with ``circular``
        Raw correlation sums ``c[k] = sum_n left[n + k] right[n]`` (dense in the xcorr layout,
        or a circular FFT correlation holding ``c[k]`` at ``k mod (FH, FW)``).
    frame_shape : (H, W)
        Shape of the left and right frames (equal); needed with ``normalize`` or
        ``circular``.
    first_shift : (ky0, kx0)
        Shift of the surface's element (0, 0).
    surface_shape : (Ho, Wo)
        Needed with ``circular``.
    left_tables, right_tables : pairs of float64 CuPy arrays
        :func:`summed_area_tables` of the left frame(s) ((L, R, W + 1)) and of the right
        frames ((N, R, W + 1)), made with the same ``bound_rows``; needed with ``normalize``.
        ``L`` is 1 (one reference for all), ``N`` (one each), or a divisor of ``N``: the
        batched mode of the patch pass, ``L`` left matrices each against its own ``N / L``
        consecutive right ones (the ``n_to_mn`` layout ``(L, N / L, Ho, Wo)`` flattened).
    normalize : bool
        ZNCC as :func:`xcorr_app.registration._normalize.zncc` (else the raw sums, 0 without overlap).
        With neither ``normalize`` nor ``circular``, ``corr`` itself is the surface.
    out : (N, Ho, Wo) float32 CuPy array, optional
        Receives the surface.

    Returns
    -------
    z : (N, Ho, Wo) float32 surface
    iy, ix : (N,) int64 peak positions (first maximum in row-major order)
    peak : (N,) float64 peak values
    conf : (N,) float64 peak-to-second-peak ratios (:func:`xcorr_app.registration._peaks.confidence`)
    """
    import cupy as cp

    corr = cp.ascontiguousarray(corr, dtype=cp.float32)
    n = corr.shape[0]
    ho, wo = surface_shape if circular else corr.shape[-2:]
    if n == 0 or ho * wo == 0:
        raise InputError(f"no surface to search: {n} surfaces of {ho}x{wo}")
    peak_key = cp.zeros(n, cp.uint64)
    min_key = cp.empty(n, cp.uint32)
    min_key.data.memset_async(0xFF, min_key.nbytes)  # 0xFFFFFFFF: a memset, no kernel to compile
    threads = NARROW if wo <= NARROW else THREADS  # (the same keys: a max is a max)
    batches = [(f0, min(n, f0 + MAX_GRID_Y) - f0) for f0 in range(0, n, MAX_GRID_Y)]
    if normalize or circular:
        h, w = frame_shape
        ky0, kx0 = first_shift
        z = out if out is not None else cp.empty((n, ho, wo), cp.float32)
        top, gap, per_left = h, 0, 1
        if normalize:
            (a1, a2), (b1, b2) = left_tables, right_tables
            lefts = a1.shape[0]
            if b1.shape[0] != n or lefts < 1 or n % lefts:
                raise InputError(f"{n} surfaces need the tables of {n} right frames and of "
                                 f"1, {n} or a divisor of {n} left ones, got {b1.shape[0]} "
                                 f"and {lefts}")
            a_stride = 0 if lefts == 1 else a1[0].size
            per_left = max(1, n // lefts)
            rows = b1.shape[1]  # H + 1, or 2 (bound_rows + 1): see table_layout
            top, gap = table_layout(h, None if rows == h + 1 else rows // 2 - 1)
        else:  # unused placeholders
            a1 = a2 = b1 = b2 = cp.zeros(1, cp.float64)
            a_stride = 0
        smaller = h * w
        min_n = max(min_overlap * smaller, 1.0)
        fh, fw = corr.shape[-2:]
        kernel = _kernel(ZNCC_PEAKS, bool(circular), bool(normalize), threads)
        for f0, count in batches:
            kernel((ho, count), (threads,),
                   (corr, np.int32(fh), np.int32(fw), a1, a2, np.int64(a_stride), b1, b2, z,
                    peak_key, min_key, np.int32(h), np.int32(w), np.int32(ho), np.int32(wo),
                    np.int32(ky0), np.int32(kx0), np.float64(min_n), np.int32(top),
                    np.int32(gap), np.int32(per_left), np.int32(f0)))
    else:
        z = corr
        rows = block_rows(threads, ho, min(n, MAX_GRID_Y))
        blocks = -(-ho // rows)
        for f0, count in batches:
            _kernel(SURFACE_EXTREMA, threads)((blocks, count), (threads,),
                                              (z, peak_key, min_key, np.int32(ho), np.int32(wo),
                                               np.int32(rows), np.int32(f0)))
    second_key = cp.zeros(n, cp.uint32)
    for f0, count in batches:
        _kernel(SECOND_PEAKS, threads)((ho, count), (threads,),
                                       (z, peak_key, second_key, np.int32(ho), np.int32(wo),
                                        np.int32(exclusion), np.int32(f0)))
    iy, ix = cp.empty(n, cp.int64), cp.empty(n, cp.int64)
    peak, conf = cp.empty(n, cp.float64), cp.empty(n, cp.float64)
    # positions, values and confidence_ratio (registration/_peaks.py) from the keys
    _kernel(DECODE_PEAKS)((-(-n // THREADS),), (THREADS,),
                          (peak_key, min_key, second_key, np.int32(wo), np.int32(n), iy, ix,
                           peak, conf))
    return z, iy, ix, peak, conf


class GpuSurfaces:
    """ZNCC (``normalization="zncc"``) or raw (``"none"``) surfaces and their peaks for a run.

    Parameters
    ----------
    frame_shape : (H, W)
        Shape of the reference and of every frame.
    bound : (int, int)
        Search range ``-bound..bound`` (the surface is ``(2 by + 1, 2 bx + 1)``, clipped to
        the overlapping shifts).
    normalization : {"zncc", "none"}
    """

    def __init__(self, frame_shape, bound, normalization):
        self.shape = tuple(frame_shape)
        self.normalize = normalization == "zncc"
        self.k0 = first_shift(self.shape, self.shape, bound)
        self.bound_rows = int(bound[0])  # the tables keep the rows this search looks up
        # the FFT path's alias-free size and surface shape (un-cropped: the kernel crops)
        geometry = fft_geometry(self.shape, self.shape, bound)
        self.fft_size, self.surface = geometry.size, geometry.shape
        # a narrow search whose shifts all overlap: the correlation at its window alone
        # (correlate/_fft_window.py: two small DFTs instead of the product and the whole inverse)
        self.window = geometry.valid == (0, geometry.shape[0], 0, geometry.shape[1]) \
            and window_applies(geometry.size, self.k0, geometry.shape)
        self._left = None  # (reference array, its tables, its padded spectrum)

    def _left_data(self, ref, fft):
        import cupy as cp

        if self._left is not None and self._left[0] is ref:
            return self._left[1:]
        left = ref if ref.ndim == 3 else ref[None]
        tables = summed_area_tables(left, bound_rows=self.bound_rows) if self.normalize else None
        spectrum = padded_spectra(left, self.fft_size) if fft else None
        if ref.ndim == 2:
            # one reference for the whole run, read by both streams of the pipeline
            cp.cuda.get_current_stream().synchronize()
            self._left = (ref, tables, spectrum)
        return tables, spectrum

    def __call__(self, ref, mov, plan, correlate):
        """``(z, iy, ix, peak, conf)`` of ``mov`` (N, H, W) against ``ref`` ((H, W) or one per
        frame); ``correlate()`` gives the dense raw surfaces for plans other than FFT."""
        fft = plan.method == "fft"
        left_tables, spectrum = self._left_data(ref, fft)
        right_tables = summed_area_tables(mov, bound_rows=self.bound_rows) \
            if self.normalize else None
        circular = fft and not self.window
        if fft:
            spectra = padded_spectra(mov, self.fft_size)
            size = self.fft_size
            if self.window:  # the dense surfaces, as the direct plans give them
                corr = correlation_window(spectrum, spectra, size, self.k0, self.surface)
            else:
                conj_product(spectrum, spectra, out=spectra, scale=1.0 / (size[0] * size[1]))
                corr = irfftn_unnormalized(spectra, size)  # c[k] at k mod fft_size
        else:
            corr = correlate()
        return surface_peaks(corr, self.shape, self.k0, self.surface, left_tables=left_tables,
                             right_tables=right_tables, circular=circular,
                             normalize=self.normalize)
