"""Piecewise-rigid 3-D registration (``align_volumes(..., patches=(gz, gy, gx))``): after the
rigid 3-D pass, the shift of every patch of every volume, and the smooth motion field through
the patch centres.

* The grid (:class:`VolumeGrid`): ``gz x gy x gx`` overlapping patches over the region of the
  reference that every volume covers after its integer rigid shift, less ``max_deviation``
  voxels on each side (the 2-D rules, one axis more:
  :func:`~xcorr_app.alignment.piecewise.axis_patches`,
  :func:`~xcorr_app.alignment.piecewise.common_box`), so that every volume's search window
  (the patch and ``max_deviation`` around it, moved by the integer rigid shift) lies inside
  the volume: no padding, no invented voxels.
* The measurement (:func:`measure_patches`), as 2-D align's patches: zero-normalized
  cross-correlation over the template patch (ZNCC), each shift within ``max_deviation`` of the
  integer rigid shift normalized by the window's mean and energy under the patch there.  The
  windows of a chunk of volumes are gathered in one indexing pass and transformed by one
  batched ``rfftn`` (all patches of all its volumes); the template patches, zero-padded to the
  window, once per run; the products transformed back give the numerators, summed-area
  tables of the windows (float64) the local sums.  The subvoxel peak: a Gaussian through the
  peak and its two neighbours along each axis (2-D align's ``subpixel="gaussian"``).  The
  patch's shift is the window's integer shift plus that peak.  The volumes and the template
  are smoothed first (a Gaussian of :data:`SMOOTH` voxels): the noise left in the windows'
  energy pulled the peak along z of layered volumes, whose z texture is faint, by up to a
  voxel towards the brighter lags (the bench's sheared stack: 0.56 voxel RMS against 0.32
  rigid; 0.17 smoothed).

  Why not the rigid pass's circular correlation of the patches and its upsampled DFT: a
  patch's circular correlation matches its own edges (the wrap) at the window's integer
  shift, and the local energy under a patch varies with the shift; both pulled the subvoxel
  shift (0.27 voxel RMS at the centres of the tests' stacks, 0.14 with the template patch
  tapered; 0.06 by ZNCC over the patch, measured on them).
* Outliers: a patch whose peak is not finite (a constant patch), lies on the border of the
  ``max_deviation`` window, or is below :data:`LOW_PEAK_SHARE` of the median of its volume's
  patches takes the volume's rigid shift.
* The field at every voxel (:func:`dense_field3`): a separable spline through the patch
  centres, the 2-D path's (:func:`~xcorr_app.alignment.piecewise.spline_weights`: natural
  cubic, linear beyond the outermost centres; with two patches along an axis, linear), and
  the volume warped by it (:func:`~._shift.warp_volume`).

Examples
--------
>>> g = VolumeGrid.make((2, 2, 3), None, 2, (20, 48, 56), ((2, 18), (2, 46), (2, 54)))
>>> g.size, g.overlap, g.window, g.starts[2].tolist()
((9, 25, 20), (2, 5, 4), (13, 29, 24), [2, 18, 34])
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...backend import array_module_of, to_numpy
from ...correlate import conj_product, fft_of
from ..piecewise import (axis_patches, common_box, integer_parts,
                         spline_weights)
from ._dft3 import AXES, correlate, parabola_vertex
from ._rows import item_sums

#: a patch whose peak is below this share of the median of its volume's patches is an
#: outlier (texture too faint, or a wrong match): it takes the volume's rigid shift
LOW_PEAK_SHARE = 0.5
#: bytes per voxel of a chunk's search windows (the float32 windows, their half spectra, the
#: correlation, the summed-area tables in float64, the FFT's work area)
PER_WINDOW_VOXEL = 36
#: sigma (voxels) of the Gaussian that smooths the volumes and the template before the patches
#: are correlated: noise left in them biases ZNCC's peak along an axis with little texture
#: (z of layered samples) towards the lags with more contrast
SMOOTH = 1.0
#: voxels of the dense field evaluated at once when a volume is warped (its coordinates)
FIELD_VOXELS = 2 ** 22
AXIS_NAMES = ("planes", "rows", "columns")


@dataclasses.dataclass(frozen=True)
class VolumeGrid:
    """Where the patches lie, in reference (output) voxel coordinates."""

    grid: tuple       # (gz, gy, gx)
    size: tuple       # (pz, py, px)
    overlap: tuple    # voxels between neighbouring patches (at least), per axis
    starts: tuple     # three int64 arrays: each patch's first voxel along z, y, x
    max_deviation: int

    @property
    def n_patches(self) -> int:
        return int(np.prod(self.grid))

    @property
    def window(self) -> tuple:
        """The search window of a patch: the patch and ``max_deviation`` around it."""
        return tuple(p + 2 * self.max_deviation for p in self.size)

    @property
    def centres(self) -> np.ndarray:
        """``(gz, gy, gx, 3)`` float64: the ``(z, y, x)`` centre of every patch."""
        axes = (s + (p - 1) / 2.0 for s, p in zip(self.starts, self.size))
        return np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)

    def settings(self) -> dict:
        """The grid as ``shifts.json`` records it (as 2-D align's ``settings["patches"]``)."""
        return {"grid": list(self.grid), "size": list(self.size),
                "overlap": list(self.overlap), "max_deviation": self.max_deviation,
                "centres": self.centres.tolist()}

    @classmethod
    def make(cls, patches, patch_overlap, max_deviation, shape, box):
        """The grid of ``patches`` ``(gz, gy, gx)`` and ``max_deviation`` (voxels, an int; as
        :class:`~._api.VolumeOptions` parsed them) over ``box``
        ``((z0, z1), (y0, y1), (x0, x1))`` of volumes of ``shape``; InputError, naming the
        axis, for a grid that does not fit."""
        ov = patch_overlap or (None,) * 3
        laid = [axis_patches(g, span, o, max_deviation, n, name, item="volume", unit="voxels")
                for g, span, o, n, name in zip(patches, box, ov, shape, AXIS_NAMES)]
        size, overlap, starts = zip(*laid)
        return cls(tuple(patches), tuple(size), tuple(overlap), tuple(starts), max_deviation)


def volume_grid(shape, rigid, options) -> VolumeGrid:
    """The run's grid (``options``: a :class:`~._api.VolumeOptions` with ``patches``) over
    the region every volume of ``shape`` (Z, Y, X) covers after its integer rigid shift, less
    the search (``rigid`` (T, 3) of all volumes; ``[[0, 0, 0]]`` checks a grid before the
    rigid pass)."""
    box = common_box(rigid, shape, options.max_deviation, item="volume", unit="voxels")
    return VolumeGrid.make(options.patches, options.patch_overlap, options.max_deviation,
                           shape, box)


def patch_windows(volumes, grid, whole, reach=0):
    """``(B * P, ...)``: patch ``p`` of volume ``b``, with ``reach`` voxels around it, moved
    by its integer shift ``whole[b]`` (the window that holds the reference's patch ``p``),
    volume-major, gathered in one indexing pass on the volumes' device; every window lies
    inside its volume (the grid's box)."""
    xp = array_module_of(volumes)
    b = len(volumes)
    index = [xp.asarray(s[None, :, None] - reach - np.asarray(whole)[:, a, None, None]
                        + np.arange(p + 2 * reach)[None, None, :])  # (B, g, p) per axis
             for a, (s, p) in enumerate(zip(grid.starts, grid.size))]
    out = volumes[xp.arange(b)[:, None, None, None, None, None, None],
                  index[0][:, :, None, None, :, None, None],
                  index[1][:, None, :, None, None, :, None],
                  index[2][:, None, None, :, None, None, :]]  # (B, gz, gy, gx, wz, wy, wx)
    return out.reshape(b * grid.n_patches, *out.shape[4:])


def smoothed(volumes):
    """``volumes`` (..., Z, Y, X) float32, a new array smoothed by a Gaussian of
    :data:`SMOOTH` voxels along the last three axes (edges: nearest), on their device."""
    xp = array_module_of(volumes)
    if xp is np:
        from scipy import ndimage
    else:
        from cupyx.scipy import ndimage
    out = volumes.astype(xp.float32, copy=False)
    for axis in AXES:  # (one axis at a time: the batch axis is left alone on either module)
        out = ndimage.gaussian_filter1d(out, SMOOTH, axis=axis, mode="nearest")
    return out


def template_spectra(template, grid):
    """``(spectra (P, wz, wy, wx//2+1), norms (P,) NumPy)`` of the template's patches (the
    reference volume's, made once per run, :func:`smoothed`): each less its mean, zero-padded
    by ``max_deviation`` on every side to the search window (no correlation wraps around),
    and their root sums of squares."""
    xp = array_module_of(template)
    patches = patch_windows(smoothed(template)[None], grid, np.zeros((1, 3), np.int64))
    mean = item_sums(patches) / float(np.prod(grid.size))  # (float64; xcorr's kernel on GPU)
    patches = patches - mean.astype(xp.float32)[:, None, None, None]
    norms = np.sqrt(to_numpy(item_sums(patches, squares=True)))
    d = grid.max_deviation
    padded = xp.zeros((grid.n_patches, *grid.window), xp.float32)
    padded[:, d:d + grid.size[0], d:d + grid.size[1], d:d + grid.size[2]] = patches
    return fft_of(xp).rfftn(padded, axes=AXES), norms


def box_sums(windows, size, count):
    """``(N, count, count, count)`` float64: the sums of ``windows`` (N, wz, wy, wx) over the
    boxes of ``size`` whose first voxel is ``i`` = 0..count-1 along each axis, by cumulative
    sums along one axis at a time (summed-area tables, float64: no cancellation)."""
    xp = array_module_of(windows)
    out = windows
    for axis, p in zip(AXES, size):
        c = xp.cumsum(out, axis=axis, dtype=xp.float64)
        zero = xp.zeros_like(xp.take(c, xp.arange(1), axis=axis))
        c = xp.concatenate([zero, c], axis=axis)
        at = xp.arange(count)
        out = xp.take(c, at + p, axis=axis) - xp.take(c, at, axis=axis)
    return out


def measure_patches(volumes, rigid, grid, tspec, tnorm):
    """The patch shifts of a chunk of ``volumes`` (B, Z, Y, X) (scaled float32, on the
    device), ``rigid`` (B, 3) their rigid shifts (host; NaN: not measured); ``tspec``,
    ``tnorm``: :func:`template_spectra`.

    Returns
    -------
    shifts (B, P, 3), peak (B, P), border (B, P) : NumPy
        Each patch's total shift (align's sign: the window's integer shift plus its peak),
        its ZNCC at the integer peak (NaN for a constant patch or window) and whether that
        peak lies on the ``max_deviation`` border.
    """
    xp = array_module_of(volumes)
    b, p, d = len(volumes), grid.n_patches, grid.max_deviation
    k, n = 2 * d + 1, float(np.prod(grid.size))
    whole, _ = integer_parts(rigid)
    win = patch_windows(smoothed(volumes), grid, whole, reach=d)  # (B * P, wz, wy, wx)
    # the lag l reads the window's box at d - l (the rigid convention: l moves it onto the
    # template), so the box sums run backwards
    back = xp.arange(k - 1, -1, -1)
    s1 = box_sums(win, grid.size, k)[:, back][:, :, back][..., back]
    s2 = box_sums(win * win, grid.size, k)[:, back][:, :, back][..., back]
    product = fft_of(xp).rfftn(win, axes=AXES)
    del win
    # R * conj(M), cross_spectra's convention; as (B, P, planes, X) the GPU's fused kernel
    xh = product.shape[-1]
    shaped = product.reshape(b, p, -1, xh)
    conj_product(tspec.reshape(p, -1, xh), shaped, out=shaped)
    corr = correlate(product, grid.window)
    del product, shaped
    lags = xp.arange(-d, d + 1)
    for axis, m in zip(AXES, grid.window):
        corr = xp.take(corr, lags % m, axis=axis)  # (B * P, k, k, k): the lags -d..d
    var = s2 - s1 * s1 / n
    scale = xp.asarray(np.repeat(np.asarray(tnorm)[None], b, axis=0).reshape(-1, 1, 1, 1))
    ok = (var > 1e-12 * xp.maximum(s2, 1e-300)) & (scale > 0)
    zncc = xp.where(ok, corr / xp.sqrt(xp.where(ok, var * scale * scale, 1.0)), -xp.inf)
    del s1, s2, var, corr
    flat = zncc.reshape(b * p, -1)
    at = xp.argmax(flat, axis=1)
    # the peak and its neighbours along each axis (clamped), fitted on the host
    iz, iy, ix = (xp.asarray(v) for v in np.unravel_index(to_numpy(at), (k, k, k)))
    rows = xp.arange(b * p)
    near = [zncc[rows, iz, iy, ix]]
    for axis, i in enumerate((iz, iy, ix)):
        for step in (-1, 1):
            j = [iz, iy, ix]
            j[axis] = xp.clip(i + step, 0, k - 1)
            near.append(zncc[rows, j[0], j[1], j[2]])
    near = to_numpy(xp.stack(near, axis=1)).astype(np.float64)  # (B * P, 7)
    index = np.stack([to_numpy(v) for v in (iz, iy, ix)], axis=1)
    top = near[:, 0]
    fine = np.zeros((b * p, 3))
    for axis in range(3):
        cm, cp = near[:, 1 + 2 * axis], near[:, 2 + 2 * axis]
        inside = (index[:, axis] > 0) & (index[:, axis] < k - 1)
        fine[:, axis] = np.where(inside, gaussian_vertex(cm, top, cp), 0.0)
    border = ((index == 0) | (index == k - 1)).any(axis=1) & (d > 0)
    peak = np.where(np.isfinite(top), top, np.nan)
    shifts = (index - d + fine).reshape(b, p, 3) + whole[:, None, :]
    return shifts, peak.reshape(b, p), border.reshape(b, p)


def gaussian_vertex(cm, c0, cp):
    """The vertex of the Gaussian through (-1, cm), (0, c0), (1, cp) (the parabola through
    their logarithms; through the values where one is not positive), clipped to +-0.5."""
    positive = (cm > 0) & (c0 > 0) & (cp > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = [np.log(np.where(positive, c, 1.0)) for c in (cm, c0, cp)]
        return np.where(positive, parabola_vertex(*logs),
                        parabola_vertex(*(np.nan_to_num(c, neginf=0.0) for c in (cm, c0, cp))))


def low_patches(peak, border):
    """``(B, P)`` bool: the outliers of :func:`measure_patches` (module docstring)."""
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(peak)
        ref = np.array([np.median(row[ok]) if ok.any() else np.nan
                        for row, ok in zip(peak, finite)])
        return ~finite | border | (peak < LOW_PEAK_SHARE * ref[:, None])


def dense_field3(field, centres, shape, planes=None, xp=np):
    """``(3, Z', Y, X)`` float64 on ``xp``'s device: the shifts of ``field`` (gz, gy, gx, 3)
    at every voxel of a volume of ``shape`` (Z, Y, X), or of its planes ``planes`` (a
    slice): the separable spline through the patch centres ``centres`` (three 1-D arrays,
    z, y, x) of the 2-D path, one axis more."""
    wz, wy, wx = (xp.asarray(spline_weights(c, n)) for c, n in zip(centres, shape))
    if planes is not None:
        wz = wz[planes]
    s = xp.asarray(np.moveaxis(np.asarray(to_numpy(field), np.float64), -1, 0))  # (3, gz, ..)
    g = s.shape[1:]
    a = xp.matmul(wz, s.reshape(3, g[0], -1)).reshape(3, -1, g[1], g[2])  # (3, Z', gy, gx)
    a = xp.matmul(wy, a)                                                   # (3, Z', Y, gx)
    return xp.matmul(a, wx.T)                                              # (3, Z', Y, X)


def plan_planes(shape) -> int:
    """Planes of a volume whose field is evaluated at once (:data:`FIELD_VOXELS`)."""
    return int(max(1, min(shape[0], FIELD_VOXELS // max(1, shape[1] * shape[2]))))
