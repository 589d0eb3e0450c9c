"""The figures of the quality report (:mod:`~xcorr_app.alignment._quality`): each frame's (or
region's) correlation with the template, the residual shift left after alignment, and the
sharpness of a mean image, on the CPU and the GPU.

On the GPU the whole area's figures come from each frame's moments over it
(:func:`area_moments`, ``kernels/alignment/quality_moments.cu``: one read of a chunk a figure;
a rigid run's two correlations and its shifted area in one, :func:`shifted_moments`; the
blocks' sums added on the device, :func:`block_sums`),
the template's and a mean image's from a pass of a kernel each, the mean images' sums from
a kernel too (``kernels/alignment/quality_images.cu``: shipped built, where
CuPy's operations compiled some 20 kernels at a first run).  A piecewise run's regions (its
area and every patch region, overlapping) from the sums of the tiles their edges cut the area
into (:class:`TileRegions`: each pixel read once), the figures made of the sums on the host
(:class:`TemplateRegions`), the same formulas on the CPU.

Examples
--------
>>> import numpy as np
>>> t = np.add.outer(np.sin(np.arange(12) / 2.0), np.cos(np.arange(16) / 3.0)).astype(np.float32)
>>> fig = AreaFigures(t, t, np)
>>> fig.zncc(np.stack([t, 2 * t + 1, np.roll(t, 1, axis=1)])).round(3).tolist()[:2]
[1.0, 1.0]
>>> bool(abs(fig.residual(t[None])).max() < 1e-6)
True
"""

from __future__ import annotations

import numpy as np

from .. import backend
from .._cuda import KernelFamily, PIXEL_C_TYPES, kernel_pixels, stride_blocks
from ..errors import InputError
from ..filters import gradient
from ..streaming import host_copies
from .piecewise import WARP_GX, device_weights

__all__ = ["RegionFigures", "AreaFigures", "area_blocks", "area_moments", "shifted_moments",
           "TileRegions", "TemplateRegions", "template_refs", "template_moments",
           "moments_of", "block_sums", "frame_sums", "sharpness"]

#: the GPU's moments of a chunk (kernels/alignment/quality_moments.cu): threads a block, and
#: the most blocks a frame (each warp then takes every (blocks * 8)-th row of the area)
MOMENT_THREADS = 256
MOMENT_BLOCKS = 64
AREA_MOMENTS = KernelFamily("quality_moments.cu", "area_moments",
                            [(t, j, MOMENT_THREADS) for t in PIXEL_C_TYPES.values()
                             for j in (1, 2)])
#: :class:`TileRegions`' kernel: threads a block (a row of tiles of a frame, a thread a column)
TILE_THREADS = 256
TILE_MOMENTS = KernelFamily("quality_moments.cu", "tile_moments",
                            [(t, j, TILE_THREADS) for t in PIXEL_C_TYPES.values()
                             for j in (1, 2)])
TILE_REGIONS = KernelFamily("quality_moments.cu", "tile_regions", [(MOMENT_THREADS,)])
#: :meth:`TileRegions.warp_moments`: a piecewise chunk warped and its report's three sets of
#: sums in one pass (a block a row segment by this many columns, a thread a column; the grid
#: widths of the warp built)
REPORT_THREADS = 128
WARP_REPORT = KernelFamily("quality_moments.cu", "warp_report",
                           [(t, g, REPORT_THREADS) for t in PIXEL_C_TYPES.values()
                            for g in (0,) + WARP_GX])
#: the most doubles of a warp_report block's field coefficients (its band of rows), and the
#: most rows of a segment outside the area (warped only: a block each)
REPORT_COEF = 2048
REPORT_ROWS = 32
#: :func:`shifted_moments`: a rigid report's chunk shifted and both its correlations' moments
SHIFTED_MOMENTS = KernelFamily("quality_moments.cu", "shifted_moments",
                               [(t, w, MOMENT_THREADS) for t in PIXEL_C_TYPES.values()
                                for w in (False, True)])
#: kernels/alignment/quality_images.cu
TEMPLATE_FIGURES = KernelFamily("quality_images.cu", "template_figures", [(MOMENT_THREADS,)])
IMAGE_FIGURES = KernelFamily("quality_images.cu", "image_figures",
                             [(t, MOMENT_THREADS) for t in ("float", "double")])
FRAME_SUMS = KernelFamily("quality_images.cu", "frame_sums",
                          [(t, MOMENT_THREADS) for t in PIXEL_C_TYPES.values()])


class RegionFigures:
    """The template's figures of P regions at once, ``templates`` (P, H, W) as they came and
    ``prepared`` (with the run's prefilter), and for the frames' regions (n, P, K):

    - :meth:`zncc`: each region's zero-normalized correlation with the template's (NaN where
      flat): the regions centred, a batched matrix product and their norms;
    - :meth:`residual`: the shift that would align each prepared region with the prepared
      template's, one Gauss-Newton step of ``frame(x) = a * template(x + s) + b`` from
      ``s = 0`` (both centred and scaled to unit norm; the template's gradient products made
      once), so a chunk costs a centring, a product and a norm, not a search; (n, P, 2) px,
      NaN for a region whose template has no gradient to fit along.

    A rigid run's area is one region (:class:`AreaFigures`)."""

    def __init__(self, templates, prepared, xp):
        self.xp = xp
        p = len(templates)
        self.t = _centred(templates.reshape(p, -1).astype(xp.float32))  # (P, K)
        self.t_norm2 = _sum64(xp.square(self.t.astype(xp.float64)), 1)
        self.t_total = _sum64(self.t, 1)  # (0 but for float32 rounding)
        q = prepared.reshape(p, *prepared.shape[-2:]).astype(xp.float64)
        # (xp.divide: a CuPy array / a number goes through NumPy's ufunc protocol, whose
        # first use imports cupyx and SciPy; see filters.gradient)
        q = q - xp.divide(_sum64(q, (1, 2)), float(q.shape[1] * q.shape[2]))[:, None, None]
        q = q / xp.maximum(xp.sqrt(_sum64(xp.square(q), (1, 2))), 1e-300)[:, None, None]
        gy, gx = gradient(q, axis=(1, 2))
        g64 = xp.stack([gy.reshape(p, -1), gx.reshape(p, -1)], axis=1)  # (P, 2, K)
        self.g = g64.astype(xp.float32)
        self.g_total = _sum64(self.g, 2)  # (P, 2)
        # the template's own projection (t @ g.T), subtracted from each region's, and the
        # normal equations' matrix, as sums of products: a rigid run on the GPU then makes no
        # matrix product (loading cuBLAS is a cost of its own in a one-shot process)
        qf = q.reshape(p, 1, -1).astype(xp.float32)
        self.tg = _sum64(qf * self.g, 2)  # (P, 2)
        h01 = (g64[:, 0] * g64[:, 1]).sum(axis=1)
        h = backend.to_numpy(xp.stack([xp.square(g64[:, 0]).sum(axis=1), h01,  # (the one wait)
                                       h01, xp.square(g64[:, 1]).sum(axis=1)], axis=1))
        h = h.reshape(p, 2, 2)
        inverse = np.full_like(h, np.nan)
        with np.errstate(invalid="ignore"):  # (a NaN template's: no inverse, NaN residuals)
            good = np.linalg.det(h) > 0
        inverse[good] = np.linalg.inv(h[good])
        self.inverse = xp.asarray(inverse)

    def zncc(self, regions):
        """(n, P) from the regions (n, P, K)."""
        xp = self.xp
        f = _centred(regions)
        num = xp.matmul(f.transpose(1, 0, 2), self.t[:, :, None])[..., 0].T.astype(xp.float64)
        return _ratio(num, _sum64(xp.square(f), 2) * self.t_norm2[None], xp)

    def residual(self, regions):
        """(n, P, 2) px from the prepared regions (n, P, K)."""
        xp = self.xp
        f = _centred(regions)
        proj = xp.matmul(f.transpose(1, 0, 2), self.g.transpose(0, 2, 1))  # (P, n, 2)
        return self.step(proj.transpose(1, 0, 2).astype(xp.float64),
                         _sum64(xp.square(f), 2))

    def step(self, proj, norm2):
        """The Gauss-Newton step (n, P, 2) from each centred region's projection on the
        template's gradient (n, P, 2) and its squared norm (n, P), through the normal equations:
        ((f / norm - t) @ g.T), the division after the product (no scaled copy)."""
        return _step(proj, norm2, self.tg, self.inverse, self.xp)


class AreaFigures(RegionFigures):
    """:class:`RegionFigures` of one region, the frames' area (n, H, W): on the CPU as any region;
    on the GPU from each frame's moments over it (:func:`area_moments`: one read of the chunk
    a figure, no centred copy; about a pivot, so a flat frame's spread is exactly 0 there as
    it is on the CPU).  A GPU pass keeps each chunk's moments (:meth:`zncc_moments`,
    :meth:`residual_moments`) and makes the figures of them on the host at its end
    (:meth:`zncc_of`, :meth:`residual_of`): a few numbers a frame, where a chain of CuPy
    operations a chunk would launch a dozen kernels and compile each on a first run."""

    def __init__(self, template, prepared, xp):
        self.shape = template.shape
        self._host = None
        if xp is np:
            super().__init__(template[None], prepared[None], xp)
        else:
            self._on_gpu(template, prepared)

    def _on_gpu(self, template, prepared):
        """The figures :class:`RegionFigures` makes, of one region on the GPU, by two passes of
        :func:`area_moments` (the means, the prepared template's spread) and one of
        ``template_figures`` (the centred template, the gradient and their sums): the CPU's
        formulas, summed in float64 in another order."""
        import cupy as cp

        self.xp = cp
        tmpl = cp.ascontiguousarray(template, cp.float32)
        prep = cp.ascontiguousarray(prepared, cp.float32)
        rows, cols = tmpl.shape
        if min(rows, cols) < 2:  # (as the CPU's gradient says)
            raise InputError(f"gradient: a {rows}x{cols} area has an axis of fewer than 2 "
                             "elements")
        k = float(rows * cols)
        # each image's sums about its first pixel p: the mean p + sum / k, the spread
        # sum(d * d) - sum(d) ** 2 / k (the blocks and the pivots copied together: one wait)
        mt, mq, pt, pq = host_copies([area_moments(a[None], prep[None]) for a in (tmpl, prep)]
                                     + [tmpl[0, :1], prep[0, :1]])
        (dt, _, _), (dq, dq2, _) = mt.sum(axis=-2)[0], mq.sum(axis=-2)[0]
        t_mean = float(pt[0]) + dt / k
        q_mean = float(pq[0]) + dq / k
        q_den = max(np.sqrt(max(dq2 - dq * dq / k, 0.0)), 1e-300)
        t, g = cp.empty((1, rows * cols), cp.float32), cp.empty((1, 2, rows * cols), cp.float32)
        blocks = _row_blocks(rows)
        partial = cp.empty((blocks, 9), cp.float64)
        TEMPLATE_FIGURES.get(MOMENT_THREADS)(
            (blocks,), (MOMENT_THREADS,), (tmpl, prep, np.int32(rows), np.int32(cols),
                                           np.float32(t_mean), np.float64(q_mean),
                                           np.float64(q_den), t, g, partial))
        s = moments_of(partial[None])[0]
        h = np.array([[s[6], s[7]], [s[7], s[8]]])[None]
        inverse = np.full_like(h, np.nan)
        if np.linalg.det(h[0]) > 0:
            inverse[0] = np.linalg.inv(h[0])
        # (the figures the GPU pass uses, on the host: zncc_of and residual_of read no others)
        self.t, self.g = t, g
        self._host = {"t_total": float(s[0]), "t_norm2": float(s[1]), "g_total": s[2:4].copy(),
                      "tg": s[None, 4:6].copy(), "inverse": inverse}

    def zncc(self, frames):
        """(n,) from the frames' areas (n, H, W)."""
        if self.xp is np:
            return super().zncc(frames.reshape(len(frames), 1, -1))[:, 0]
        return self.xp.asarray(self.zncc_of(moments_of(self.zncc_moments(frames))))

    def residual(self, frames):
        """(n, 2) px from the prepared frames (n, H, W)."""
        if self.xp is np:
            return super().residual(frames.reshape(len(frames), 1, -1))[:, 0]
        return self.xp.asarray(self.residual_of(moments_of(self.residual_moments(frames))))

    def zncc_moments(self, frames, out=None, area=None):
        """(n, blocks, 3) float64 on the GPU: the blocks' moments of ``frames`` (of their
        ``area`` where they are whole frames), whose sums (:func:`moments_of`) :meth:`zncc_of`
        takes (``out``: as :func:`area_moments`')."""
        return area_moments(frames, self.t.reshape(1, *self.shape), area=area, out=out)

    def shifted_moments(self, frames, shifts, area, before, after, whole=None):
        """The ``area`` of ``frames`` (whole, on the GPU) shifted by ``shifts`` (n, 2) float64
        CuPy, and both correlations' moments (:meth:`zncc_moments`' of the area as it came
        into ``before``, of it shifted into ``after``) in one read (the whole frames shifted
        into ``whole`` too): :func:`shifted_moments`."""
        return shifted_moments(frames, shifts, self.t.reshape(self.shape), area, before, after,
                               whole)

    def residual_moments(self, frames, out=None):
        """(n, blocks, 4) float64 on the GPU: the blocks' moments of the prepared frames,
        whose sums :meth:`residual_of` takes."""
        return area_moments(frames, self.g[0].reshape(2, *self.shape), out=out)

    def zncc_of(self, s):
        """(n,) NumPy from the sums of :meth:`zncc_moments` (on the host; NaN from a frame's
        NaN or Inf pixels, quietly, as on the GPU before)."""
        c = self._constants()
        with np.errstate(invalid="ignore", over="ignore"):
            mean, spread = self._spread(s)
            return _ratio(s[:, 2] - mean[:, 0] * c["t_total"], spread * c["t_norm2"], np)

    def residual_of(self, s):
        """(n, 2) px NumPy from the sums of :meth:`residual_moments` (on the host, quietly as
        :meth:`zncc_of`)."""
        c = self._constants()
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            mean, spread = self._spread(s)
            return _step((s[:, 2:] - mean * c["g_total"][None])[:, None], spread[:, None],
                         c["tg"], c["inverse"], np)[:, 0]

    def _spread(self, s):
        """Each frame's mean (about the pivot) and its sum of squares about it."""
        mean = s[:, :1] / float(self.t.shape[1])
        return mean, np.maximum(s[:, 1] - s[:, 0] * mean[:, 0], 0.0)

    def _constants(self) -> dict:
        """The template's figures on the host (made there on the GPU; on the CPU taken from
        :class:`RegionFigures`' arrays once)."""
        if self._host is None:
            self._host = {"t_total": float(backend.to_numpy(self.t_total)[0]),
                          "t_norm2": float(backend.to_numpy(self.t_norm2)[0]),
                          "g_total": backend.to_numpy(self.g_total)[0],
                          "tg": backend.to_numpy(self.tg), "inverse": backend.to_numpy(self.inverse)}
        return self._host


def _step(proj, norm2, tg, inverse, xp):
    """:meth:`RegionFigures.step` of the template's ``tg`` (P, 2) and ``inverse`` (P, 2, 2)."""
    norm = xp.sqrt(norm2)
    some = xp.greater(norm, 0)  # (a function, not ``>``: see filters.gradient)
    b = proj / xp.where(some, norm, 1.0)[..., None] - tg[None]
    # (n, P, 2) = b @ inverse.T written out: no cuBLAS, no reduction kernel of its own
    step = b[..., :1] * inverse[None, :, :, 0] + b[..., 1:] * inverse[None, :, :, 1]
    return xp.where(some[..., None], -step, xp.nan)


def _sum64(a, axis=None):
    """``a.sum(axis, dtype=float64)`` (``axis``: None, an axis or a tuple of them), on the GPU by
    CuPy's own reduction kernel: a contiguous array summed over its trailing axes goes to CUB's,
    which NVRTC compiles at first use, seconds each (docs/how-align-works.md, measurements); with a
    trailing axis of one the sum is not over trailing axes, and CuPy's own kernel compiles in a
    small part of that."""
    xp = backend.array_module_of(a)
    if xp is np:
        return a.sum(axis=axis, dtype=np.float64)
    if axis is None or a.ndim == 1:  # ((K, 1) would be F-contiguous: CUB again)
        return a.reshape(1, -1, 1).sum(axis=1, dtype=xp.float64)[0, 0]
    axes = tuple(k % a.ndim for k in (axis if isinstance(axis, tuple) else (axis,)))
    return a[..., None].sum(axis=axes, dtype=xp.float64)[..., 0]


def _ratio(num, den2, xp):
    """``num / sqrt(den2)``, NaN where ``den2`` is 0 (a flat region or template)."""
    den = xp.sqrt(den2)
    some = xp.greater(den, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return xp.where(some, num / xp.where(some, den, 1.0), xp.nan)


def _centred(a):
    """``a`` (..., K) less the mean of its last axis (summed in float64), float32 (new)."""
    xp = backend.array_module_of(a)
    mean = xp.divide(_sum64(a, -1), a.shape[-1]).astype(xp.float32)
    return a.astype(xp.float32) - mean[..., None]


def area_moments(frames, refs, area=None, out=None):
    """``(n, blocks, 2 + J)`` float64 CuPy: per frame of ``frames`` (n, h, w) over ``area``
    ``(y0, y1, x0, x1)`` (default the frame), each block's sums of d, d * d and d * ``refs[j]``
    for the J (1 or 2) float32 images ``refs`` (J, y1 - y0, x1 - x0), d each pixel as float32
    less the area's first pixel: one read of the chunk (``kernels/alignment/quality_moments.cu``).
    The host adds the blocks up (:func:`moments_of`): CuPy's sum would compile at first use.
    ``out``: where to write them (a C-contiguous view of a pass's buffer of
    ``(frames, area_blocks(rows), 2 + J)``: the pass then copies them to the host once)."""
    import cupy as cp

    frames, c_type = kernel_pixels(frames)
    n, h, w = frames.shape
    y0, y1, x0, x1 = area or (0, h, 0, w)
    rows, cols = y1 - y0, x1 - x0
    refs = cp.ascontiguousarray(refs, cp.float32)
    j = len(refs)
    if refs.shape != (j, rows, cols) or j not in (1, 2) or not (0 <= y0 < y1 <= h
                                                                and 0 <= x0 < x1 <= w):
        raise ValueError(f"area_moments: {j} references of {refs.shape[1:]} for the area "
                         f"{(y0, y1, x0, x1)} of {h}x{w} frames")
    blocks = _row_blocks(rows)
    partial = _partial(out, (n, blocks, 2 + j))
    kernel = AREA_MOMENTS.get(c_type, j, MOMENT_THREADS)
    for a in range(0, n, 65535):  # (the grid's y extent)
        b = min(n, a + 65535)
        kernel((blocks, b - a), (MOMENT_THREADS,),
               (frames[a:b], np.int32(h), np.int32(w), np.int32(y0), np.int32(x0),
                np.int32(rows), np.int32(cols), refs, partial[a:b]))
    return partial


def shifted_moments(frames, shifts, ref, area, before, after, whole=None):
    """``(n, rows, cols)`` float32 CuPy: the ``area`` ``(y0, y1, x0, x1)`` of each of ``frames``
    (n, h, w) CuPy shifted by its ``shifts`` (n, 2) float64 CuPy (bilinear, fill 0, as
    :func:`~.warp.shift_frames`, but a shift's taps weighed once a frame: the same figures, not
    always the same last bit), less its first pixel (a filter of it keeps float32's digits for
    the texture; the report's figures and the mean image's sharpness see no offset); and, in
    the same read, :func:`area_moments` against ``ref`` (rows, cols) float32 of the area as it
    came into ``before`` and of it shifted into ``after`` (C-contiguous float64 ``(n,
    area_blocks(rows), 3)`` each).  ``whole``: a C-contiguous float32 CuPy array (n, h, w) the
    whole shifted frames are written to as well (a run's aligned output: no warp of its own),
    each pixel :func:`~.warp.shift_frames`' bit for bit, and so the area's
    (``kernels/alignment/quality_moments.cu`` shifted_moments)."""
    import cupy as cp

    frames, c_type = kernel_pixels(frames)
    n, h, w = frames.shape
    y0, y1, x0, x1 = area
    rows, cols = y1 - y0, x1 - x0
    blocks = _row_blocks(rows)
    ref = cp.ascontiguousarray(ref, cp.float32)
    if ref.shape != (rows, cols) or shifts.shape != (n, 2) or shifts.dtype != cp.float64 \
            or not shifts.flags.c_contiguous or not (0 <= y0 < y1 <= h and 0 <= x0 < x1 <= w) \
            or (whole is not None and (whole.shape != frames.shape or whole.dtype != cp.float32
                                       or not whole.flags.c_contiguous)):
        raise ValueError(f"shifted_moments: a {ref.shape} reference and {shifts.shape} "
                         f"{shifts.dtype} shifts for the area {(y0, y1, x0, x1)} of {n} "
                         f"{h}x{w} frames" + ("" if whole is None else
                                              f", into {whole.shape} {whole.dtype}"))
    before, after = (_partial(o, (n, blocks, 3)) for o in (before, after))
    out = cp.empty((n, rows, cols), cp.float32)
    kernel = SHIFTED_MOMENTS.get(c_type, whole is not None, MOMENT_THREADS)
    for a in range(0, n, 65535):  # (the grid's y extent)
        b = min(n, a + 65535)
        kernel((blocks, b - a), (MOMENT_THREADS,),
               (frames[a:b], np.int32(h), np.int32(w), np.int32(y0), np.int32(x0),
                np.int32(rows), np.int32(cols), shifts[a:b], ref, out[a:b], before[a:b],
                after[a:b], None if whole is None else whole[a:b]))
    return out


class TemplateRegions:
    """The template's figures of R regions of an area that may overlap (:class:`TileRegions`:
    the area itself and a piecewise run's patch regions), and the frames' figures from their
    sums over the regions (:meth:`TileRegions.moments` on the GPU, :meth:`TileRegions.host_moments`
    on the CPU: the same formulas after):

    - :meth:`zncc`: each region's zero-normalized correlation with the template's (NaN where
      flat), from the sums of d, d * d and d * t (``t_ref``: the area of the template as it
      came);
    - :meth:`residual`: one Gauss-Newton step of ``frame(x) = a * template(x + s) + b`` from
      ``s = 0`` on each region of the prepared frames, from the sums of d, d * d and d * g
      (``g_ref``: the gradient of the prepared template's area, made once for every region:
      inside a region it is the region's own, at its edges it looks across them); NaN for a
      region whose template has no gradient to fit along.

    Made of the template's own sums over the regions (:func:`template_moments`, host arrays):
    no pass of the host over the template's pixels, no wait for the device before the end."""

    def __init__(self, tiles, sums):
        a, b, c, d = (np.asarray(v, np.float64).reshape(tiles.count, -1) for v in sums)
        k = ((tiles.boxes[:, 1] - tiles.boxes[:, 0])
             * (tiles.boxes[:, 3] - tiles.boxes[:, 2])).astype(np.float64)
        self.pixels = k
        self.t_mean = a[:, 0] / k
        self.t_norm2 = np.maximum(a[:, 1] - a[:, 0] * self.t_mean, 0.0)
        q_mean = b[:, 0] / k
        norm = np.maximum(np.sqrt(np.maximum(b[:, 1] - b[:, 0] * q_mean, 0.0)), 1e-300)
        self.q_norm = norm
        g_sum = np.stack([c[:, 0], d[:, 0]], axis=1)
        self.g_total = g_sum / norm[:, None]
        self.tg = (b[:, 2:4] - q_mean[:, None] * g_sum) / norm[:, None] ** 2
        h = np.stack([c[:, 2], c[:, 3], c[:, 3], d[:, 2]], axis=1).reshape(-1, 2, 2)
        h = h / norm[:, None, None] ** 2
        self.inverse = np.full_like(h, np.nan)
        good = np.linalg.det(h) > 0
        self.inverse[good] = np.linalg.inv(h[good])

    def zncc(self, s):
        """(n, R) from the regions' sums (n, R, 3) of d, d * d, d * t."""
        d, dd, dt = _components(s)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            spread = _spread(d, dd, self.pixels)
            dt -= self.t_mean * d  # (the numerator about the region's means)
            spread *= self.t_norm2
            return _over_root(dt, spread)

    def residual(self, s):
        """(n, R, 2) px from the prepared regions' sums (n, R, 4) of d, d * d, d * g."""
        d, dd, dgy, dgx = _components(s)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            norm = np.sqrt(_spread(d, dd, self.pixels))
            mean = d / self.pixels
            # b = (projection on g / the norm) - tg: the frame's, less the template's own
            by = (dgy / self.q_norm - mean * self.g_total[:, 0]) / norm - self.tg[:, 0]
            bx = (dgx / self.q_norm - mean * self.g_total[:, 1]) / norm - self.tg[:, 1]
            inv = self.inverse
            out = np.empty((*d.shape, 2))
            np.negative(by * inv[:, 0, 0] + bx * inv[:, 0, 1], out=out[..., 0])
            np.negative(by * inv[:, 1, 0] + bx * inv[:, 1, 1], out=out[..., 1])
            out[~(norm > 0)] = np.nan
            return out


def _components(s) -> list:
    """The sums (..., M) as M contiguous arrays (...): the host's figures run on them."""
    return list(np.ascontiguousarray(np.moveaxis(np.asarray(s, np.float64), -1, 0)))


def _spread(d, dd, k):
    """Each region's sum of squares about its mean from its sums of d and d * d about any
    pivot, over ``k`` pixels (not below 0)."""
    spread = d * d
    spread /= k
    np.subtract(dd, spread, out=spread)
    return np.maximum(spread, 0.0, out=spread)


def _over_root(num, den2):
    """``num / sqrt(den2)``, NaN where ``den2`` is not above 0 (a flat region or template)."""
    den = np.sqrt(den2)
    flat = ~(den > 0)
    den[flat] = 1.0
    num /= den
    num[flat] = np.nan
    return num


def template_refs(image, prepared, area, xp):
    """``(t_ref (1, rows, cols), g_ref (2, rows, cols), q (1, rows, cols))`` float32 on
    ``xp``'s device: the ``area`` of the template ``image`` (h, w) as it came, the gradient
    (NumPy's, in float64) of the area of its ``prepared`` copy, and that area: the references
    of the frames' sums and what :func:`template_moments` sums.  On the GPU by kernels that
    ship built (``area_float``, ``template_figures``)."""
    y0, y1, x0, x1 = area
    rows, cols = y1 - y0, x1 - x0
    if min(rows, cols) < 2:  # (as the gradient says)
        raise InputError(f"gradient: a {rows}x{cols} area has an axis of fewer than 2 elements")
    if xp is np:
        t = np.ascontiguousarray(np.asarray(image, np.float32)[y0:y1, x0:x1])
        q = np.ascontiguousarray(np.asarray(prepared, np.float32)[y0:y1, x0:x1])
        return t[None], np.stack(np.gradient(q.astype(np.float64))).astype(np.float32), q[None]
    import cupy as cp

    from .rigid import area_float

    t, q = (area_float(a[None], area) for a in (image, prepared))
    t_out, g = cp.empty((1, rows, cols), cp.float32), cp.empty((2, rows, cols), cp.float32)
    blocks = _row_blocks(rows)
    TEMPLATE_FIGURES.get(MOMENT_THREADS)(
        (blocks,), (MOMENT_THREADS,), (t, q, np.int32(rows), np.int32(cols), np.float32(0.0),
                                       np.float64(0.0), np.float64(1.0), t_out, g,
                                       cp.empty((blocks, 9), cp.float64)))
    return t, g, q


def template_moments(tiles, t_ref, g_ref, q):
    """The template's own sums over the regions (no pivot; on the references' device) that
    :class:`TemplateRegions` is made of: of t with t, of the prepared template ``q`` with g, of
    g_y with g and of g_x with g_x (:func:`template_refs`' arrays)."""
    pairs = ((t_ref, t_ref), (q, g_ref), (g_ref[:1], g_ref), (g_ref[1:], g_ref[1:]))
    if isinstance(t_ref, np.ndarray):
        return [tiles.host_moments(f, r, (0, 0), pivoted=False)[0] for f, r in pairs]
    return [tiles.moments(f, r, (0, 0), pivoted=False)[0] for f, r in pairs]


class TileRegions:
    """Sums of d, d * d and d * ref_j over R regions of an area that may overlap (the area
    itself, a piecewise run's patch regions), from one read of a chunk: the area cut into the
    tiles that the regions' edges make, a block a tile of a frame
    (``kernels/alignment/quality_moments.cu`` tile_moments), then each region's tiles added up
    (tile_regions): ``(n, R, 2 + J)`` float64 CuPy, d each pixel less the area's first pixel.

    ``area`` ``(y0, y1, x0, x1)``; ``regions`` (R, 4) ``(y0, y1, x0, x1)`` inside it (frame
    coordinates).

    Examples
    --------
    >>> tiles = TileRegions((0, 10, 0, 12), [(0, 10, 0, 12), (0, 6, 0, 6), (4, 10, 5, 12)])
    >>> tiles.ys.tolist(), tiles.xs.tolist()
    ([0, 4, 6, 10], [0, 5, 6, 12])
    >>> tiles.spans.tolist()[1]
    [0, 2, 0, 2]
    """

    def __init__(self, area, regions, xp=np):
        y0, y1, x0, x1 = (int(v) for v in area)
        regions = np.asarray(regions, np.int64).reshape(-1, 4)
        if not ((regions[:, 0] >= y0) & (regions[:, 1] <= y1) & (regions[:, 2] >= x0)
                & (regions[:, 3] <= x1) & (regions[:, 0] < regions[:, 1])
                & (regions[:, 2] < regions[:, 3])).all():
            raise ValueError(f"TileRegions: regions {regions.tolist()} outside the area "
                             f"{(y0, y1, x0, x1)}")
        self.area = (y0, y1, x0, x1)
        self.ys = np.unique(np.concatenate([[y0, y1], regions[:, 0], regions[:, 1]])) - y0
        self.xs = np.unique(np.concatenate([[x0, x1], regions[:, 2], regions[:, 3]])) - x0
        self.spans = np.stack([np.searchsorted(self.ys, regions[:, 0] - y0),
                               np.searchsorted(self.ys, regions[:, 1] - y0),
                               np.searchsorted(self.xs, regions[:, 2] - x0),
                               np.searchsorted(self.xs, regions[:, 3] - x0)], axis=1)
        self.boxes = regions - np.array([y0, y0, x0, x0])  # (area coordinates)
        # (uploaded once here: the chunks' streams read them)
        self._device = None if xp is np else tuple(xp.asarray(a, xp.int32)
                                                   for a in (self.ys, self.xs, self.spans))
        self._layouts = {}  # (warp_moments' row segments and spans, by the output's box)

    @property
    def count(self) -> int:
        return len(self.spans)

    def moments(self, frames, refs, origin=None, out=None, pivoted=True):
        """``(n, R, 2 + J)`` float64 CuPy of ``frames`` (n, h, w) whose area starts at
        ``origin`` ``(y, x)`` (default: the area's own corner; ``(0, 0)`` for frames cut to
        the area), against ``refs`` (J, rows, cols) float32 of the area; ``out``: where to
        write (a C-contiguous view of a pass's buffer); ``pivoted`` False: d each pixel as it
        is (the template's own sums)."""
        import cupy as cp

        ys, xs, spans = self._device
        frames, c_type = kernel_pixels(frames)
        n, h, w = frames.shape
        oy, ox = self.area[0::2] if origin is None else origin
        rows, cols = int(self.ys[-1]), int(self.xs[-1])
        refs = cp.ascontiguousarray(refs, cp.float32)
        j = len(refs)
        if refs.shape != (j, rows, cols) or j not in (1, 2) or not (
                0 <= oy and oy + rows <= h and 0 <= ox and ox + cols <= w):
            raise ValueError(f"tile_moments: {j} references of {refs.shape[1:]} for an area of "
                             f"{rows}x{cols} at {(oy, ox)} of {h}x{w} frames")
        ty, tx = len(self.ys) - 1, len(self.xs) - 1
        partial = _partial(out, (n, self.count, 2 + j))
        if not n:
            return partial
        tiles = cp.empty((n, ty * tx, 2 + j), cp.float64)
        kernel = TILE_MOMENTS.get(c_type, j, TILE_THREADS)
        shared = (TILE_THREADS + tx) * (2 + j) * 8
        for a in range(0, n, 65535):  # (the grid's y extent)
            b = min(n, a + 65535)
            kernel((ty, b - a), (TILE_THREADS,),
                   (frames[a:b], np.int32(h), np.int32(w), np.int32(oy), np.int32(ox), ys,
                    np.int32(ty), xs, np.int32(tx), refs, np.int32(bool(pivoted)),
                    tiles[a:b]), shared_mem=shared)
        TILE_REGIONS.get(MOMENT_THREADS)((n,), (MOMENT_THREADS,),
                                         (tiles, np.int32(ty), np.int32(tx), np.int32(2 + j),
                                          spans, np.int32(self.count), partial))
        return partial

    def warp_moments(self, frames, prepared, field, weights, t_ref, g_ref, out, box, sums=None):
        """``out`` (n, oh, ow) float32 CuPy, C-contiguous: the pixels ``box`` ``(y0, y1, x0,
        x1)`` (it holds the area) of ``frames`` (n, h, w) warped by ``field`` (n, gy, gx, 2)
        with spline ``weights`` as :func:`~.piecewise.warp_chunk` warps them (bilinear, fill 0:
        the same values); and ``sums`` (n, R, 10) float64 (made where None, returned): the
        regions' sums of the frames as they came against ``t_ref`` (1, rows, cols) (0-2), of
        the warped frames against it (3-5) and of the ``prepared`` frames (n, h, w) float32
        warped through the same taps against ``g_ref`` (2, rows, cols) (6-9): the template's
        area and its prepared copy's gradient (:func:`template_refs`).  One kernel
        (``warp_report``) reads each pixel once and never writes the warped prepared frames;
        each set less a pivot of its own (the figures do not see it), a pixel's products in
        float32 (the sums within float32 rounding of their largest terms)."""
        import cupy as cp

        ys, xs, _ = self._device
        frames, c_type = kernel_pixels(frames)
        prepared = cp.ascontiguousarray(prepared, cp.float32)
        n, h, w = frames.shape
        by, y1, bx, x1 = (int(v) for v in box)
        oh, ow = y1 - by, x1 - bx
        ay, ax = self.area[0] - by, self.area[2] - bx
        rows, cols = int(self.ys[-1]), int(self.xs[-1])
        t_ref, g_ref = (cp.ascontiguousarray(r, cp.float32) for r in (t_ref, g_ref))
        if prepared.shape != frames.shape or t_ref.shape != (1, rows, cols) \
                or g_ref.shape != (2, rows, cols) \
                or out.shape != (n, oh, ow) or out.dtype != cp.float32 \
                or not out.flags.c_contiguous or h * w >= 2 ** 31 \
                or not (0 <= by <= by + ay and ay + rows <= oh and by + oh <= h) \
                or not (0 <= bx <= bx + ax and ax + cols <= ow and bx + ow <= w):
            raise ValueError(f"warp_report: the area {self.area} of the box {box} of frames "
                             f"{frames.shape}, prepared {prepared.shape}, out {out.dtype} "
                             f"{out.shape}, references {t_ref.shape} {g_ref.shape}")
        sums = _partial(sums, (n, self.count, 10))
        if not n:
            return sums
        wy, wxt, s = device_weights(weights, field, frames)
        gy, gx = s.shape[1:3]
        band = max(1, min(32, REPORT_COEF // (2 * gx)))
        segments, first, stretches, spans = self._layout(oh, ow, ay)
        ty, tx = len(self.ys) - 1, len(self.xs) - 1
        tiles = cp.empty((n, ty * stretches * tx, 10), cp.float64)
        g = gx if gx in WARP_GX else 0
        kernel = WARP_REPORT.get(c_type, g, REPORT_THREADS)
        shared = (band * 2 * gx + 10 * REPORT_THREADS) * 8
        blocks = (len(segments) - 1) * stretches
        for a in range(0, n, 65535):  # (the grid's y extent)
            kernel((blocks, min(n, a + 65535) - a), (REPORT_THREADS,),
                   (frames, prepared, out, np.int32(h), np.int32(w), np.int32(by), np.int32(bx),
                    np.int32(oh), np.int32(ow), segments, np.int32(first), np.int32(ay),
                    np.int32(ax), ys, np.int32(ty), xs, np.int32(tx), t_ref, g_ref, wy, wxt, s,
                    np.int32(gy), np.int32(gx), np.int32(band), np.int32(stretches),
                    np.int32(a), tiles), shared_mem=shared)
        # (a tile row's stretches are rows of their own: a region's rows scaled by them)
        TILE_REGIONS.get(MOMENT_THREADS)((n,), (MOMENT_THREADS,),
                                         (tiles, np.int32(ty * stretches), np.int32(tx),
                                          np.int32(10), spans, np.int32(self.count), sums))
        return sums

    def _layout(self, oh, ow, ay):
        """:meth:`warp_moments`' row segments of an output of ``oh`` x ``ow`` whose area
        starts at row ``ay`` (device int32: the rows above the area in pieces of at most
        :data:`REPORT_ROWS`, its tile rows, the rows below), the index of the area's first,
        the column stretches of a row and the regions' spans over the (tile row, stretch)
        rows (device int32), made once a layout."""
        import cupy as cp

        key = (oh, ow, ay)
        if key not in self._layouts:
            below = ay + int(self.ys[-1])
            above = list(range(0, ay, REPORT_ROWS))
            edges = above + [ay + int(v) for v in self.ys] + list(
                range(below + REPORT_ROWS, oh, REPORT_ROWS)) + ([oh] if below < oh else [])
            k = -(-ow // REPORT_THREADS)
            self._layouts[key] = (cp.asarray(np.array(edges, np.int32)), len(above), k,
                                  cp.asarray(self.spans * np.array([k, k, 1, 1]), cp.int32))
        return self._layouts[key]

    def host_moments(self, frames, refs, origin=None, pivoted=True):
        """:meth:`moments` on the CPU: ``(n, R, 2 + J)`` float64 NumPy, each row of tiles'
        sums down its rows by :func:`numpy.einsum` (``d`` and ``d * ref`` at once, against the
        references with a plane of ones, and ``d * d``), then across its tiles by
        :func:`numpy.add.reduceat`; each region's added up from its tiles.  (A float64 copy of
        the area and of each product, reduced twice, was 3.7 times as slow.)"""
        oy, ox = self.area[0::2] if origin is None else origin
        rows, cols = int(self.ys[-1]), int(self.xs[-1])
        f = np.asarray(frames)[:, oy:oy + rows, ox:ox + cols].astype(np.float32)
        pivot = f[:, :1, :1].astype(np.float64) if pivoted else 0.0
        weights = np.stack([np.ones((rows, cols)), *(np.asarray(r, np.float64) for r in refs)])
        ty, tx = len(self.ys) - 1, len(self.xs) - 1
        tiles = np.empty((len(f), ty, tx, 1 + len(weights)))
        with np.errstate(invalid="ignore", over="ignore"):  # (NaN/Inf pixels: NaN sums)
            for a in range(ty):  # (the tiles' bounds rise strictly: np.unique)
                band = slice(int(self.ys[a]), int(self.ys[a + 1]))
                d = f[:, band].astype(np.float64) - pivot
                sums = np.einsum("nhw,jhw->njw", d, weights[:, band])
                squares = np.einsum("nhw,nhw->nw", d, d)[:, None]
                columns = np.concatenate([sums[:, :1], squares, sums[:, 1:]], axis=1)
                tiles[:, a] = np.add.reduceat(columns, self.xs[:-1], axis=2).transpose(0, 2, 1)
            return np.stack([tiles[:, a:b, c:e].sum(axis=(1, 2))
                             for a, b, c, e in self.spans], axis=1)


def _partial(out, shape):
    """``out`` checked to be a C-contiguous float64 CuPy array of ``shape``, or a new one."""
    import cupy as cp

    if out is None:
        return cp.empty(shape, cp.float64)
    if out.shape != shape or out.dtype != cp.float64 or not out.flags.c_contiguous:
        raise ValueError(f"moments: out {out.shape} {out.dtype} for {shape} float64")
    return out


def area_blocks(rows) -> int:
    """The blocks :func:`area_moments` sums an area of ``rows`` rows in (its ``out``'s second
    axis)."""
    return _row_blocks(rows)


def moments_of(partial) -> np.ndarray:
    """The sums (n, M) NumPy of :func:`area_moments`' blocks (n, blocks, M), added in
    order."""
    return backend.to_numpy(partial).sum(axis=-2)


def block_sums(partial):
    """``(n, M)`` float64 CuPy: the sums of :func:`area_moments`' blocks ``(n, blocks, M)``
    added in order on the GPU (``tile_regions`` over one region of every block): for M >= 2
    the sums :func:`moments_of` makes on the host, bit for bit (NumPy adds the blocks left to
    right there), without the copy of every block and NumPy's slow reduction over a short
    middle axis."""
    import cupy as cp

    n, blocks, m = partial.shape
    out = cp.empty((n, 1, m), cp.float64)
    if n:
        spans = cp.asarray(np.array([0, blocks, 0, 1], np.int32))
        TILE_REGIONS.get(MOMENT_THREADS)((n,), (MOMENT_THREADS,),
                                         (cp.ascontiguousarray(partial), np.int32(blocks),
                                          np.int32(1), np.int32(m), spans, np.int32(1), out))
    return out[:, 0]


def _row_blocks(rows) -> int:
    """Blocks of the row-wise kernels (a warp a row, the rows of a block every blocks-th)."""
    return max(1, min(MOMENT_BLOCKS, -(-rows // (4 * (MOMENT_THREADS // 32)))))


def frame_sums(acc, frames, ok=None, area=None):
    """``acc`` (rows, cols) float64 CuPy, in place, plus the ``area`` ``(y0, y1, x0, x1)``
    (default the frame) of each of ``frames`` (n, h, w) CuPy (as float32) with ``ok`` (n,) bool
    CuPy (None: all), added a frame at a time in order."""
    import cupy as cp

    frames, c_type = kernel_pixels(frames)
    n, h, w = frames.shape
    y0, y1, x0, x1 = area or (0, h, 0, w)
    if acc.dtype != cp.float64 or acc.shape != (y1 - y0, x1 - x0) or not acc.flags.c_contiguous \
            or not (0 <= y0 < y1 <= h and 0 <= x0 < x1 <= w) \
            or (ok is not None and ok.dtype != cp.bool_):
        raise ValueError(f"frame_sums: the area {(y0, y1, x0, x1)} of {frames.dtype} frames "
                         f"{frames.shape} into {acc.dtype} {acc.shape}")
    if n:
        FRAME_SUMS.get(c_type, MOMENT_THREADS)(
            (stride_blocks(acc.size, MOMENT_THREADS),), (MOMENT_THREADS,),
            (frames, np.int32(n), np.int32(h), np.int32(w), np.int32(y0), np.int32(x0),
             np.int32(y1 - y0), np.int32(x1 - x0), ok, acc))
    return acc


def sharpness(image, divisor=1.0) -> float:
    """Gradient energy over variance of a mean image ``image / divisor`` (scale-free; higher
    is sharper), on the image's device (a GPU run's means stay there: on the host the two took
    a fifth of a short run; there one kernel, ``image_figures``, makes its sums); the image as
    float32, its gradient in float32, summed in float64."""
    xp = backend.array_module_of(image)
    if min(image.shape) < 3:
        return float("nan")
    if xp is not np:
        var, energy = _image_figures(image, float(divisor))
    else:
        with np.errstate(invalid="ignore", over="ignore"):  # (NaN/Inf pixels: NaN, quietly)
            img = (image / divisor if divisor != 1 else image).astype(np.float32)
            gy, gx = gradient(img)
            var = float(img.var(dtype=np.float64))
            energy = float(_sum64(np.square(gy)) + _sum64(np.square(gx)))
    if not np.isfinite(var) or var <= 0:
        return float("nan")
    return float(energy / image.size / var)


def _image_figures(image, divisor):
    """``(variance, gradient energy)`` of a 2-D CuPy image ``/ divisor`` (as float32; times
    its reciprocal: a division in the kernel spilled registers)."""
    import cupy as cp

    c_type = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}.get(
        np.dtype(image.dtype))
    if c_type is None:
        image, c_type = image.astype(cp.float64), "double"
    image = cp.ascontiguousarray(image)
    rows, cols = image.shape
    blocks = _row_blocks(rows)
    partial = cp.empty((blocks, 4), cp.float64)
    IMAGE_FIGURES.get(c_type, MOMENT_THREADS)(
        (blocks,), (MOMENT_THREADS,), (image, np.int32(rows), np.int32(cols),
                                       np.float64(1.0 / divisor), partial))
    d, d2, gy2, gx2 = moments_of(partial[None])[0]
    k = float(rows * cols)
    with np.errstate(invalid="ignore", over="ignore"):
        return max(d2 - d * d / k, 0.0) / k if np.isfinite(d2) else float("nan"), gy2 + gx2
