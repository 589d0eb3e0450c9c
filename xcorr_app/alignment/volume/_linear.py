"""The 3-D path's ``boundary="linear"`` (and ``"auto"``): shifts of volumes cut from a larger
scene, whose content enters and leaves at the faces (a microscope's volumes), as the 2-D
default measures frames: zero-normalized cross-correlation over the overlap.

The circular correlation of such volumes is pulled towards zero shift by the seams the FFT's
wrap-around makes at every face (where the first and last planes meet), and at a shift the
content that left at one face and wrapped in at the other adds a term that matches nothing:
on ``xcorr bench accuracy --kinds volumes`` it erred by 0.5-4.1 voxels RMS, scikit-image's 3-D
call as much.  Here:

* **The integer peak** is the circular correlation's, of the volumes' periodic components
  (Moisan's periodic-plus-smooth decomposition, in 3-D: :func:`smooth_spectrum`, the 2-D
  ``linear`` refinement's :func:`~xcorr_app.registration.periodic_spectrum` with one axis
  more): without the seams it lands within a voxel of the truth on most volumes, where the
  plain one missed by more on most (by up to 5.8 voxels); the climb below does the rest.
* **ZNCC over the overlap** (:func:`linear_refine`) at the 27 integer lags around it: the
  sums ``sum R(x + l) M(x)`` over the overlap (:func:`cube_sums`) are on the CPU the circular
  correlation's values (exact at integer lags: :func:`~._dft3.samples3d`) less what wrapped
  around (the thin boxes of the other side), on the GPU summed directly (one kernel, one read
  of both volumes); each volume's sums over the overlap from its marginal sums.  The climb moves
  to the best neighbour until the centre is the best (at most :data:`CLIMB_STEPS` steps,
  never past ``max_shift``).
* **Noise-free energies**: the energies of the ZNCC's denominator are the sums of products of
  neighbouring voxels along x, ``sum (v(x) - m)(v(x + 1) - m)``, not of squares: the camera's
  noise is independent between voxels and drops out, while the squares hold it, and as the
  overlap loses planes of another brightness the noise's share of it changes with the lag
  and moved the peak (by 0.14-0.25 plane on the bench's volumes with anisotropic z; 0.01-0.06
  with these).  A volume whose neighbours are not alike (content rough at the voxel: less
  than :data:`NEIGHBOUR_SHARE` of its energy survives) is normalized by its squares.
* **The subvoxel peak**: a quadratic in three variables fitted by least squares to the 27
  values (:func:`quadratic_peak`: with the cross terms, which the three parabolas along the
  axes leave out: an elongated peak at an angle to the axes biased them by up to 0.1 voxel).
* **Gauss-Newton from there** (:func:`gauss_newton`): the quadratic through voxel-spaced
  ZNCC values is biased where the peak is sharp (planes 2-4 pixels apart, content near their
  Nyquist), by up to 0.08 voxel RMS on the bench's 16-plane volumes, noise-free or not.  Both
  volumes smoothed by a gaussian of :data:`GN_SIGMA` voxel, the volume shifted by its
  estimate (Keys' cubic convolution, separable: trilinear's smoothing biased the fit as much
  again), ``volume(x - s) = a * reference(x + d) + b`` fitted by least squares linear in
  ``d`` over the box every tap reaches (less :data:`GN_EDGE` at the faces),
  :data:`GN_STEPS` times; a fit that fails, leaves the quadratic's vertex by more than
  :data:`GN_MAX_STEP`, or leaves ``max_shift`` by more than half a voxel keeps the vertex
  (docs/performance.md: the bench's figures).
* **Wrap-around stacks** (circular shifts, test data): with ``boundary="auto"`` the stack is
  wrap-around where, over up to :data:`WRAP_VOLUMES` volumes, the median share of the
  wrapped-around part's match to the reference's other side in the overlap's
  (:func:`wrap_ratio`) is at least :data:`WRAP_SHARE`; its volumes are then refined
  circularly, by the upsampled DFT (:func:`~._dft3.refine3d`), as ``boundary="circular"``.

Examples
--------
Two volumes cut from a larger one, the second moved by a spline (not circularly):

>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> from xcorr_app.alignment import align_volumes
>>> big = ndi.gaussian_filter(np.random.default_rng(1).random((28, 56, 56)), 1.5)
>>> moved = ndi.shift(big, (1.3, -0.6, 2.2), order=3)
>>> stack = np.stack([big[6:22, 12:44, 12:44], moved[6:22, 12:44, 12:44]])
>>> np.round(align_volumes(stack, device="cpu").shifts[1], 2).tolist()
[-1.31, 0.6, -2.21]
>>> np.round(align_volumes(stack, device="cpu", boundary="circular").shifts[1], 2).tolist()
[-0.94, 0.51, -2.07]
"""

from __future__ import annotations

import bisect
import functools
import itertools

import numpy as np

from ..._cuda import KernelFamily, stride_blocks, upload_shared
from ...backend import array_module_of, to_numpy
from ...correlate import fft_of
from ._dft3 import AXES, parabola_vertex, samples3d
from ._rows import item_sums, total64

__all__ = ["smooth_spectrum", "VolumeSums", "cube_sums", "linear_refine", "quadratic_peak",
           "gauss_newton", "keys_shift", "wrap_ratio", "WrapVote", "circular_start",
           "CLIMB_STEPS", "NEIGHBOUR_SHARE", "WRAP_SHARE", "WRAP_VOLUMES", "GN_SIGMA",
           "GN_STEPS", "GN_MAX_STEP", "GN_EDGE", "GN_PLANE_VOXELS"]

#: steps the integer peak may climb from the periodic components' peak to a better ZNCC
CLIMB_STEPS = 4
#: the neighbour products' sum must keep this share of a volume's energy (sum of squares)
#: for the noise-free energies; below it, content rough at the voxel, the squares are used
NEIGHBOUR_SHARE = 0.2
#: ``boundary="auto"``: a stack is wrap-around where the ZNCC over its volumes'
#: wrapped-around parts is at least this share of their overlaps' (:func:`wrap_ratio`, the
#: median over up to ``WRAP_VOLUMES`` volumes that tell; cropped volumes: about 0)
WRAP_SHARE = 0.5
WRAP_VOLUMES = 8
#: the wrapped-around part must hold this many voxels to tell (smaller: linear), and the
#: overlap's ZNCC of the differences must reach this to trust the ratio
WRAP_VOXELS = 64
WRAP_MIN_CORRELATION = 0.2
#: :func:`gauss_newton`: the gaussian both volumes are smoothed by (voxels: the reference's
#: noise in its gradient would pull the fit; wider smooths the scene's detail away), its steps
#: (a third changed nothing on the bench), the farthest it may move (voxels)
GN_SIGMA = 1.0
GN_STEPS = 2
GN_MAX_STEP = 1.0
#: voxels of one matrix product of the fit's sums (float64: 48 MB a product)
GN_PLANE_VOXELS = 1 << 20
#: voxels of each face left out of the fit (the gradient's stencil, and the faces where the
#: smoothing reflects content the other volume does not hold; docs/volumes.md)
GN_EDGE = 2
#: kernels/alignment/linear3d.cu: threads a block, and at most this many blocks (each writes
#: its partial sums; they are added in order)
SUM_THREADS = 256
SUM_BLOCKS = 1024
OVERLAP_SUMS = KernelFamily("linear3d.cu", "overlap_sums", [(SUM_THREADS,)])
FIT_PRODUCTS = KernelFamily("linear3d.cu", "fit_products", [(SUM_THREADS,)])
#: VolumeSums' kinds of item, as the marginal kernels number them
KINDS = ("plain", "squares", "neighbours")
MARGINAL_SUMS = KernelFamily("linear3d.cu", "marginal_sums",
                             [(k, SUM_THREADS) for k in range(len(KINDS))])
CORNER_VALUES = KernelFamily("linear3d.cu", "corner_values",
                             [(k, SUM_THREADS) for k in range(len(KINDS))])
#: the 27 integer offsets around a lag, z slowest (the order of the kernel's sums)
OFFSETS = np.array(list(itertools.product((-1, 0, 1), repeat=3)), np.int64)


def smooth_spectrum(volumes):
    """The half spectrum (``rfftn`` layout, (B, Z, Y, X//2+1)) of the smooth component of
    Moisan's periodic-plus-smooth decomposition of each of ``volumes`` (B, Z, Y, X): its
    spectrum less this one is the periodic component's, without the seams where opposite
    faces meet.  Built from 2-D transforms of the three face differences (no 3-D transform):
    the boundary image ``v`` (the difference of opposite faces on each face, with opposite
    signs) has the spectrum ``sum_a (1 - exp(2 pi i k_a / N_a)) D_a``, ``D_a`` the transform
    of axis ``a``'s face difference over the other two axes, and the smooth component's is
    ``v^ / (sum_a 2 cos(2 pi k_a / N_a) - 6)`` (0 at zero frequency).

    >>> import numpy as np
    >>> u = np.add.outer(np.add.outer(np.arange(5.0), np.arange(6.0)), np.arange(8.0))
    >>> p = np.fft.irfftn(np.fft.rfftn(u) - smooth_spectrum(u[None])[0], u.shape, axes=(0, 1, 2))
    >>> bool(np.abs(p[0] - p[-1]).max() < 0.5 * np.abs(u[0] - u[-1]).max())
    True
    """
    xp = array_module_of(volumes)
    fft = fft_of(xp)
    b, z, y, x = volumes.shape
    xh = x // 2 + 1
    real = volumes.dtype if volumes.dtype in (np.float32, np.float64) else np.float64
    v = volumes.astype(real, copy=False)
    dz = fft.rfftn(v[:, -1] - v[:, 0], axes=(-2, -1))                    # (B, Y, Xh)
    dy = fft.rfftn(v[:, :, -1] - v[:, :, 0], axes=(-2, -1))              # (B, Z, Xh)
    dx = fft.fftn((v[..., -1] - v[..., 0]).astype(dz.dtype), axes=(-2, -1))  # (B, Z, Y)
    kz, ky, kx = np.arange(z), np.arange(y), np.arange(xh)
    az, ay, ax = (xp.asarray((1 - np.exp(2j * np.pi * k / n)).astype(dz.dtype))
                  for k, n in ((kz, z), (ky, y), (kx, x)))
    out = az[None, :, None, None] * dz[:, None]
    out += ay[None, None, :, None] * dy[:, :, None, :]
    out += ax[None, None, None, :] * dx[..., None]
    out *= _inverse_laplacian((z, y, x), np.dtype(dz.dtype).name, xp.__name__,
                              _device_id(xp))
    return out


def _device_id(xp) -> int:
    return -1 if xp is np else int(xp.cuda.Device().id)


@functools.lru_cache(maxsize=4)
def _inverse_laplacian(shape, complex_type, module, device):
    """``1 / (sum_a 2 cos(2 pi k_a / N_a) - 6)`` over the half spectrum of ``shape`` (0 at
    zero frequency), real of ``complex_type``'s precision, on ``module``'s device ``device``:
    made once a shape (NumPy's cosines over a large volume's spectrum are a chunk's host time
    otherwise)."""
    import importlib

    z, y, x = shape
    kz, ky, kx = np.arange(z), np.arange(y), np.arange(x // 2 + 1)
    den = (2 * np.cos(2 * np.pi * kz / z)[:, None, None] + 2 * np.cos(2 * np.pi * ky / y)[:, None]
           + 2 * np.cos(2 * np.pi * kx / x) - 6.0)
    den[0, 0, 0] = 1.0
    inv = 1.0 / den
    inv[0, 0, 0] = 0.0
    inv = inv.astype(np.float32 if complex_type == "complex64" else np.float64)
    if module == "numpy":
        inv.setflags(write=False)
        return inv
    xp = importlib.import_module(module)
    with xp.cuda.Device(device):
        return upload_shared(inv)


class VolumeSums:
    """The sums a volume's ZNCC needs over any box of the form "the whole volume less a slab
    at one end of each axis" (the overlap at a lag), from its marginals: the total, the three
    2-D marginal sums (over one axis each) and the blocks at its corners, on the host.

    ``values`` (Z, Y, X) on the device, centred; ``ends`` (3,) voxels at each end of each axis
    whose corner blocks are kept (the deepest slab any box takes off).  ``kind``: ``"plain"``
    (the values), ``"squares"`` or ``"neighbours"`` (the products of x neighbours).
    """

    def __init__(self, values, ends, kind="plain"):
        xp = array_module_of(values)
        self.shape = z, y, x = tuple(int(n) for n in values.shape)
        self.index = [_end_index(n, int(t)) for n, t in zip(self.shape, ends)]
        # (the three marginals and the corner blocks into one buffer: one copy to the host)
        shapes = [(z, y), (z, x), (y, x), tuple(len(i) for i in self.index)]
        sizes = [int(np.prod(p)) for p in shapes]
        starts = np.cumsum([0] + sizes)
        buf = xp.empty(int(starts[-1]), xp.float64)
        zy, zx, yx, corner = (buf[a:a + n].reshape(p) for a, n, p in zip(starts, sizes, shapes))
        if xp is not np and values.dtype == np.float32 and x >= 2:
            _gpu_marginals(values, KINDS.index(kind), self.index, (zy, zx, yx, corner))
        else:
            f = values
            if kind == "squares":
                f = values * values
            elif kind == "neighbours":
                f = xp.empty_like(values)
                xp.multiply(values[..., :-1], values[..., 1:], out=f[..., :-1])
                xp.multiply(values[..., -1], values[..., -2], out=f[..., -1])
            f.sum(axis=2, dtype=xp.float64, out=zy)
            f.sum(axis=1, dtype=xp.float64, out=zx)
            f.sum(axis=0, dtype=xp.float64, out=yx)
            ix = [xp.asarray(i) for i in self.index]
            corner[...] = f[ix[0][:, None, None], ix[1][None, :, None], ix[2][None, None, :]]
        host = to_numpy(buf)
        self.zy, self.zx, self.yx, self.corner = (
            host[a:a + n].reshape(p) for a, n, p in zip(starts, sizes, shapes))
        self.total = float(self.zy.sum())
        self.prof = (self.zy.sum(axis=1), self.zy.sum(axis=0), self.zx.sum(axis=0))
        # (prefix sums of the slabs, planes and corner blocks: a box is a few lookups, where
        # NumPy's sums of small slices took most of a GPU run's host time)
        # (the planes' and the corner's over the kept ends only: a cut lies inside them)
        self._slabs = [_prefix(p).tolist() for p in self.prof]
        self._planes = tuple(((a, b), _prefix(plane[np.ix_(self.index[a], self.index[b])]))
                             for (a, b), plane in (((0, 1), self.zy), ((0, 2), self.zx),
                                                   ((1, 2), self.yx)))
        self._corner = _prefix(self.corner)
        self._index = [i.tolist() for i in self.index]

    def box(self, lo, hi) -> float:
        """The sum over the box ``[lo, hi)`` (per axis), where each axis loses at most one end
        (``lo == 0`` or ``hi == n``) no deeper than the ``ends`` kept."""
        cut = [_cut(lo[a], hi[a], n) for a, n in enumerate(self.shape)]
        total = self.total
        for a in range(3):
            if cut[a] is not None:
                total -= self._slabs[a][cut[a][1]] - self._slabs[a][cut[a][0]]
        # (each cut as positions among the kept ends; one deeper would sum a part of it)
        at = [None if c is None else (bisect.bisect_left(i, c[0]), bisect.bisect_left(i, c[1]))
              for i, c in zip(self._index, cut)]
        if any(p is not None and p[1] - p[0] != c[1] - c[0] for p, c in zip(at, cut)):
            raise ValueError(f"a box of {lo}..{hi} cuts deeper than the kept ends")
        for (a, b), t in self._planes:
            if at[a] is not None and at[b] is not None:
                (a0, a1), (b0, b1) = at[a], at[b]
                total += t.item(a1, b1) - t.item(a0, b1) - t.item(a1, b0) + t.item(a0, b0)
        if None not in at:
            (z0, z1), (y0, y1), (x0, x1) = at
            t = self._corner
            total -= (t.item(z1, y1, x1) - t.item(z0, y1, x1) - t.item(z1, y0, x1)
                      - t.item(z1, y1, x0) + t.item(z0, y0, x1) + t.item(z0, y1, x0)
                      + t.item(z1, y0, x0) - t.item(z0, y0, x0))
        return total


def _prefix(a) -> np.ndarray:
    """``a``'s inclusive prefix sums along every axis, a zero in front along each (float64):
    the sum over ``[i0, i1) x [j0, j1) ...`` from the ``2 ** ndim`` corners."""
    out = np.zeros(tuple(n + 1 for n in a.shape))
    out[tuple(slice(1, None) for _ in a.shape)] = a
    for axis in range(a.ndim):
        np.cumsum(out, axis=axis, out=out)
    return out


def _gpu_marginals(values, kind, index, out):
    """:class:`VolumeSums`' marginals and corner blocks of a float32 CuPy volume into ``out``
    (zy, zx, yx, corner: float64 views) by ``linear3d.cu``'s kernels, the items (``kind``:
    :data:`KINDS`) made as they are read."""
    import cupy as cp

    v = cp.ascontiguousarray(values)
    z, y, x = (int(n) for n in v.shape)
    zy, zx, yx, corner = out
    # (each marginal as (planes, rows, cols), summed over rows)
    for o, (planes, rows, cols) in ((zy, (z * y, x, 1)), (zx, (z, y, x)), (yx, (1, z, y * x))):
        blocks = stride_blocks(planes * cols, SUM_THREADS, SUM_BLOCKS)
        MARGINAL_SUMS.get(kind, SUM_THREADS)((blocks,), (SUM_THREADS,), (
            v, np.int64(planes), np.int64(rows), np.int64(cols), np.int32(x), o))
    iz, iy, ix = (cp.asarray(i.astype(np.int32)) for i in index)
    blocks = stride_blocks(corner.size, SUM_THREADS, SUM_BLOCKS)
    CORNER_VALUES.get(kind, SUM_THREADS)((blocks,), (SUM_THREADS,), (
        v, np.int32(y), np.int32(x), iz, iy, ix, *(np.int32(len(i)) for i in index), corner))


def _end_index(n, t):
    """The voxel indices of an axis of ``n`` within ``t`` of either end (all where they
    meet)."""
    t = max(0, min(int(t), n))
    if 2 * t >= n:
        return np.arange(n)
    return np.concatenate([np.arange(t), np.arange(n - t, n)])


def _cut(lo, hi, n):
    """``(start, stop)`` of what an axis's box ``[lo, hi)`` leaves out (None: nothing)."""
    if lo > 0:
        return (0, lo)
    if hi < n:
        return (hi, n)
    return None


def _boxes(shape, lag):
    """``(reference box, volume box)``: ``(lo, hi)`` of the overlap of ``R(x + lag)`` and
    ``M(x)`` in each one's voxels."""
    r = ([max(0, l) for l in lag], [min(n, n + l) for n, l in zip(shape, lag)])
    m = ([max(0, -l) for l in lag], [min(n, n - l) for n, l in zip(shape, lag)])
    return r, m


def _dot(ref, vol, lag, xp):
    """``sum R(x + lag) M(x)`` over their overlap (a device scalar, float64)."""
    (rlo, rhi), (mlo, mhi) = _boxes(ref.shape, lag)
    if any(h <= l for l, h in zip(rlo, rhi)):
        return xp.zeros((), xp.float64)
    a = ref[rlo[0]:rhi[0], rlo[1]:rhi[1], rlo[2]:rhi[2]]
    b = vol[mlo[0]:mhi[0], mlo[1]:mhi[1], mlo[2]:mhi[2]]
    return (a * b).sum(dtype=xp.float64)


def linear_sums(ref, vol, lags, circular):
    """``sum R(x + l) M(x)`` over the overlap (NumPy float64, one per lag) of the centred
    volumes ``ref``, ``vol`` (device), from the circular correlation's values ``circular`` at
    those integer lags: directly where the overlap is the smaller part, else the circular
    value less what wrapped around (its aliases: the same lag less a whole axis on each axis
    it moves along, each a thin box)."""
    xp = array_module_of(ref)
    shape = ref.shape
    size = float(np.prod(shape))
    parts, plan = [], []
    for i, lag in enumerate(lags):
        n = float(np.prod([s - abs(l) for s, l in zip(shape, lag)]))
        if n <= size / 2:
            plan.append((i, 1.0, len(parts)))
            parts.append(_dot(ref, vol, lag, xp))
            continue
        plan.append((i, None, None))
        moving = [a for a in range(3) if lag[a]]
        for r in range(1, len(moving) + 1):
            for axes in itertools.combinations(moving, r):
                alias = list(lag)
                for a in axes:
                    alias[a] -= int(np.sign(lag[a])) * shape[a]
                plan.append((i, -1.0, len(parts)))
                parts.append(_dot(ref, vol, alias, xp))
    values = to_numpy(xp.stack(parts)) if parts else np.zeros(0)
    out = np.array([float(c) for c in circular], np.float64)
    for i, sign, j in plan:
        if sign == 1.0:
            out[i] = values[j]
        elif sign == -1.0:
            out[i] -= values[j]
    return out


def cube_sums(ref, vol, centre, product, lags):
    """``{lag: sum R(x + lag) M(x)}`` over the overlap (float64) of the centred volumes
    ``ref``, ``vol`` for ``lags`` (some of the 27 around the integer lag ``centre``).  On the GPU
    all 27 in one read of both volumes (``overlap_sums``: the CPU's way below took about 130
    small reductions a volume there, each a launch and a wait); on the CPU from the circular
    correlation's values (``product``'s samples at the 27 lags) less what wrapped around
    (:func:`linear_sums`)."""
    xp = array_module_of(vol)
    around = [tuple(int(v) for v in centre + o) for o in OFFSETS]
    if xp is not np:
        z, y, x = (int(n) for n in vol.shape)
        sums = to_numpy(_block_sums(OVERLAP_SUMS, z * y * x, 27, (
            xp.ascontiguousarray(ref, xp.float32), xp.ascontiguousarray(vol, xp.float32),
            np.int32(z), np.int32(y), np.int32(x), *(np.int32(c) for c in centre))))
        got = dict(zip(around, sums))
        return {lag: float(got[lag]) for lag in lags}
    grid = to_numpy(samples3d(product, vol.shape, np.asarray(centre, np.float64)[None], 1.0,
                              3, nyquist=True))[0].ravel()
    circ = dict(zip(around, grid))
    return dict(zip(lags, linear_sums(ref, vol, lags, [circ[lag] for lag in lags])))


def _block_sums(family, total, count, args):
    """A ``linear3d.cu`` reduction's ``count`` sums (float64 CuPy): its blocks' partial sums
    added in order (``row_sums``: the same numbers every run)."""
    import cupy as cp

    blocks = stride_blocks(total, SUM_THREADS, SUM_BLOCKS)
    partial = cp.empty((count, blocks), cp.float64)
    family.get(SUM_THREADS)((blocks,), (SUM_THREADS,), (*args, partial))
    return item_sums(partial)


def zncc_values(lags, sums, rs, ms, energies):
    """The ZNCC (NumPy, one per lag) from the overlap sums ``sums``, the reference's and the
    volume's :class:`VolumeSums` of values ``rs``, ``ms`` and of energies ``energies`` (the
    pair for the reference and the volume); -inf where either side is flat."""
    shape = rs.shape
    out = np.full(len(lags), -np.inf)
    for i, lag in enumerate(lags):
        (rlo, rhi), (mlo, mhi) = _boxes(shape, lag)
        n = float(np.prod([h - l for l, h in zip(rlo, rhi)]))
        if n < 2:
            continue
        sr, sm = rs.box(rlo, rhi), ms.box(mlo, mhi)
        er = energies[0].box(rlo, rhi) - sr * sr / n
        em = energies[1].box(mlo, mhi) - sm * sm / n
        if er > 0 and em > 0:
            out[i] = (sums[i] - sr * sm / n) / np.sqrt(er * em)
    return out


def quadratic_peak(values):
    """The vertex (3,) relative to the centre of the quadratic in three variables fitted by
    least squares to ``values`` (3, 3, 3) at offsets -1, 0, 1 along each axis, each component
    clipped to +-0.5; where the fit is no maximum (or a value is not finite: an axis a plane
    thick), the parabolas through the centre and its two neighbours along each axis
    (:func:`~._dft3.parabola_vertex`; 0 along an axis without three finite values).

    A quadratic whose axes are at an angle (exact: 1.2 / 7 and -0.4 / 7):

    >>> f = lambda z, y, x: -(z - 1.2) ** 2 - 2 * (y - .9) ** 2 - (x - 1) ** 2 + (z - 1) * (y - 1)
    >>> (np.round(quadratic_peak(np.fromfunction(f, (3, 3, 3))), 3) + 0.0).tolist()
    [0.171, -0.057, 0.0]
    """
    v = np.asarray(values, np.float64)
    if np.isfinite(v).all():
        design, _ = _design()
        c = np.linalg.lstsq(design, v.ravel(), rcond=None)[0]
        hess = np.array([[2 * c[4], c[7], c[8]], [c[7], 2 * c[5], c[9]],
                         [c[8], c[9], 2 * c[6]]])
        if np.all(np.linalg.eigvalsh(hess) < 0):
            return np.clip(-np.linalg.solve(hess, c[1:4]), -0.5, 0.5)
    out = np.zeros(3)  # (an axis without a finite triple, one plane thick: no fit along it)
    for a in range(3):
        triple = [v[tuple(1 + d * (np.arange(3) == a))] for d in (-1, 0, 1)]
        if np.isfinite(triple).all():
            out[a] = parabola_vertex(*triple)
    return out


def _design():
    """The 27 offsets and the design matrix (1, z, y, x, z2, y2, x2, zy, zx, yx)."""
    o = OFFSETS.astype(np.float64)
    return np.column_stack([np.ones(27), o, o ** 2, o[:, 0] * o[:, 1], o[:, 0] * o[:, 2],
                            o[:, 1] * o[:, 2]]), o


def _allowed(lag, shape, bounds):
    """Whether the integer peak may sit at ``lag``: within ``max_shift`` and half the axis."""
    for l, n, b in zip(lag, shape, bounds):
        half = n // 2
        if not -half <= l <= n - half - 1 or (b is not None and 2 * b + 1 < n and abs(l) > b):
            return False
    return True


class Reference:
    """What the refinement keeps of the reference volume: its centred values (device), and
    its sums (:class:`VolumeSums`) of values, squares and neighbour products, remade with
    deeper corner blocks where a volume's lags need them."""

    def __init__(self, centred):
        self.values = centred
        self._sums = {}
        self.ends = np.zeros(3, np.int64)

    def differences(self, ends):
        """``(differences along x (device) with the last column zeroed, their VolumeSums, of
        their squares, that column)`` (cached; :func:`wrap_ratio`)."""
        xp = array_module_of(self.values)
        if getattr(self, "_diff", None) is None or np.any(np.asarray(ends) > self._diff_ends):
            self._diff_ends = np.maximum(getattr(self, "_diff_ends", 0), np.asarray(ends))
            d = differences(self.values)
            self._seam = d[..., -1].copy()
            d[..., -1] = 0.0
            self._diff = (d, VolumeSums(d, self._diff_ends),
                          VolumeSums(d, self._diff_ends, "squares"), self._seam)
        return self._diff

    def smoothed(self):
        """``(values, gradients)``: the reference smoothed as :func:`gauss_newton` smooths
        the volumes, and its gradient along z, y and x (central differences; made once)."""
        if getattr(self, "_smoothed", None) is None:
            from ...filters import gradient

            values = smoothed(self.values)
            self._smoothed = (values, list(gradient(values)))
        return self._smoothed

    def sums(self, ends):
        if np.any(np.asarray(ends) > self.ends) or not self._sums:
            self.ends = np.maximum(self.ends, np.asarray(ends, np.int64))
            self._sums = {k: VolumeSums(self.values, self.ends, k)
                          for k in ("plain", "squares", "neighbours")}
        return self._sums


def centred(volume):
    """``volume`` less its mean (summed in float64), float32, as :func:`~._dft3.spectrum`
    centres it."""
    xp = array_module_of(volume)
    v = xp.asarray(volume, dtype=xp.float32)
    total = total64(v)
    # (xp.subtract: CuPy hands ``array - number`` to NumPy's ufunc protocol, whose first use
    # imports cupyx)
    return xp.subtract(v, float(total) / v.size, dtype=xp.float32)


def linear_refine(reference, volume, product, coarse, bounds, subvoxel=True):
    """The shift of one volume by ZNCC over the overlap (module docstring).

    Parameters
    ----------
    reference : Reference
    volume : (Z, Y, X) device array
        The volume, scaled as the correlation's (:meth:`~._source.Volumes.read`).
    product : (1, Z, Y, X//2+1) device array
        Its cross-power spectrum with the reference (:func:`~._dft3.cross_spectra`, of the
        volumes themselves, not their periodic components).
    coarse : (3,) int
        The integer peak to start from.
    bounds : tuple
        ``max_shift`` (3-tuple, None entries) or None.
    subvoxel : bool
        Fit the peak between voxels (else the integer peak).

    Returns
    -------
    shift : (3,) float64
    zncc : float
        At the integer peak.
    """
    shape = tuple(int(n) for n in volume.shape)
    bounds = (None,) * 3 if bounds is None else tuple(bounds)
    vol = centred(volume)
    centre = np.asarray(coarse, np.int64)
    ends = np.minimum(np.abs(centre) + CLIMB_STEPS + 2, np.asarray(shape))
    rsum = reference.sums(ends)
    msum = {k: VolumeSums(vol, ends, k) for k in ("plain", "neighbours")}
    squares = float(total64(vol, squares=True))
    kind = "neighbours"
    if not (rsum["neighbours"].total >= NEIGHBOUR_SHARE * rsum["squares"].total
            and msum["neighbours"].total >= NEIGHBOUR_SHARE * squares):
        kind = "squares"
        msum["squares"] = VolumeSums(vol, ends, "squares")
    energies = (rsum[kind], msum[kind])
    seen = {}

    def around(c):  # (the 27 lags around c, the ZNCC of those not seen yet measured)
        lags = [tuple(int(v) for v in c + o) for o in OFFSETS]
        todo = [l for l in lags if l not in seen]
        if todo:
            got = cube_sums(reference.values, vol, c, product, todo)
            seen.update(zip(todo, zncc_values(todo, [got[l] for l in todo], rsum["plain"],
                                              msum["plain"], energies)))
        return lags

    for _ in range(CLIMB_STEPS + 1):
        lags = around(centre)
        best = max(lags, key=lambda l: (seen[l], -sum(abs(np.array(l) - centre))))
        step = np.array(best) - centre
        if not step.any() or not _allowed(best, shape, bounds):
            break
        centre = np.array(best)
    else:
        around(centre)  # (the last step moved: the fit needs the new centre's neighbours)
    final = [tuple(int(v) for v in centre + o) for o in OFFSETS]
    cube = np.array([seen[l] for l in final]).reshape(3, 3, 3)
    peak = float(cube[1, 1, 1])
    if not subvoxel:
        return centre.astype(np.float64), peak
    return gauss_newton(reference, vol, centre + quadratic_peak(cube), bounds), peak


def smoothed(volume):
    """``volume`` float32 smoothed as :func:`gauss_newton` smooths both volumes (a gaussian of
    :data:`GN_SIGMA` voxel along each axis, mode ``reflect``), on its device."""
    from ...filters import gaussian_light

    return gaussian_light(volume, GN_SIGMA, dtype=np.float32)


def keys_shift(volume, shift):
    """``(values, lo)``: ``volume`` (Z, Y, X) shifted by ``shift`` (``out[x] = volume[x -
    shift]``) by Keys' cubic convolution along each axis in turn, on the box ``lo .. lo +
    values.shape`` where all four taps of every axis lie inside; None where that box is
    thinner than 3 voxels.

    >>> v = np.add.outer(np.arange(6.0), np.add.outer(np.arange(7.0), np.arange(8.0) ** 2))
    >>> out, lo = keys_shift(v, (0.5, -1.0, 0.25))
    >>> lo.tolist(), bool(np.allclose(out[0, 0, 0], (2 - 0.5) + (1 + 1.0) + (2 - 0.25) ** 2))
    ([2, 1, 2], True)
    """
    from ...filters import taps_along
    from ..piecewise import keys_weights

    out, lo = volume, []
    for axis, s in enumerate(shift):
        whole = int(np.floor(s))
        t = 1.0 - (s - whole)  # (the sample x - s lies t past the tap x - whole - 1)
        n = volume.shape[axis]
        a, b = max(0, whole + 2), min(n, n - 1 + whole)
        if b - a < 3:
            return None
        # (the taps at -1, 0, 1, 2 of the sample's floor x - whole - 1)
        out = taps_along(out, keys_weights(t), axis, a - whole - 2, b - a)
        lo.append(a)
    return out, np.asarray(lo)


def _fit_sums(ref, grads, box, moved, inner):
    """``(6, 6)`` float64 NumPy: the sums of the products of the fit's columns (``ref`` and its
    three ``grads`` over ``box``, ``moved`` over ``inner``, boxes of one shape) and a column of
    ones.  On the GPU in one read (``fit_products``); on the CPU by :func:`_products`."""
    xp = array_module_of(moved)
    if xp is np:
        return _products([ref[box], *(g[box] for g in grads), moved[inner]])
    size = [b.stop - b.start for b in box]
    arrays = [xp.ascontiguousarray(a, xp.float32) for a in (ref, *grads, moved)]
    sums = to_numpy(_block_sums(FIT_PRODUCTS, int(np.prod(size)), 20, (
        *arrays[:4], np.int32(ref.shape[1]), np.int32(ref.shape[2]), arrays[4],
        np.int32(moved.shape[1]), np.int32(moved.shape[2]), *(np.int32(n) for n in size),
        *(np.int32(b.start) for b in box), *(np.int32(b.start) for b in inner))))
    out = np.empty((6, 6))
    rows, cols = np.triu_indices(6)
    out[rows[:-1], cols[:-1]] = sums  # (the kernel's order: row by row, the pair (5, 5) last)
    out[5, 5] = float(np.prod(size))
    return np.triu(out) + np.triu(out, 1).T


def _products(columns):
    """``(C + 1, C + 1)`` float64 NumPy: the sums of the products of ``columns`` (C arrays of
    one shape) and a column of ones, as float64 matrix products of planes of at most
    :data:`GN_PLANE_VOXELS` voxels."""
    xp = array_module_of(columns[0])
    planes, per = columns[0].shape[0], int(np.prod(columns[0].shape[1:]))
    step = max(1, GN_PLANE_VOXELS // max(per, 1))
    out = xp.zeros((len(columns) + 1, len(columns) + 1), xp.float64)
    for a in range(0, planes, step):
        b = min(planes, a + step)
        m = xp.empty((len(columns) + 1, (b - a) * per), xp.float64)
        for i, c in enumerate(columns):
            m[i].reshape(c[a:b].shape)[...] = c[a:b]  # (cast in place: no copy of the slice)
        m[-1] = 1.0
        out += m @ m.T
    return to_numpy(out)


def gauss_newton(reference, volume, shift, bounds=(None, None, None)):
    """``shift`` (3,) of ``volume`` (Z, Y, X, on the reference's device) refined against
    :class:`Reference` ``reference`` (module docstring, :data:`GN_STEPS`); ``shift`` as it
    came where a fit fails, moves it more than :data:`GN_MAX_STEP`, or past half a voxel
    beyond ``bounds`` (``max_shift``'s per axis, None: unbounded), where the quadratic's
    vertex ends."""
    start = np.asarray(shift, np.float64)
    if min(volume.shape) < 3:  # (no central difference across a thinner axis)
        return start
    ref, grads = reference.smoothed()
    vol = smoothed(volume)
    s = start.copy()
    for _ in range(GN_STEPS):
        got = keys_shift(vol, s)
        if got is None:
            return start
        moved, lo = got
        lo1 = np.maximum(lo, GN_EDGE)
        hi1 = np.minimum(lo + np.asarray(moved.shape), np.asarray(ref.shape) - GN_EDGE)
        if np.any(hi1 - lo1 < 2):
            return start
        box = tuple(slice(int(a), int(b)) for a, b in zip(lo1, hi1))
        inner = tuple(slice(int(a - l), int(b - l)) for a, b, l in zip(lo1, hi1, lo))
        # (the columns ref, its gradient, the moved volume and 1: the normal equations of
        # ref, gradient and 1 against it in one matrix of their products)
        p = _fit_sums(ref, grads, box, moved, inner)
        keep = [0, 1, 2, 3, 5]
        try:
            c = np.linalg.solve(p[np.ix_(keep, keep)], p[keep, 4])
        except np.linalg.LinAlgError:
            return start
        if not (np.isfinite(c).all() and c[0] > 0):
            return start
        s = s + c[1:4] / c[0]
        if np.abs(s - start).max() > GN_MAX_STEP:
            return start
    if any(b is not None and abs(v) > b + 0.5 for v, b in zip(s, bounds)):
        return start
    return s


def wrap_ratio(reference, volume, product, lag):
    """How well the part of ``volume`` that wrapped around at the integer ``lag`` matches the
    reference's other side, against how well their overlap matches (``boundary="auto"``:
    wrap-around volumes about 1, cropped ones about 0; None where too little wrapped around,
    NaN where the overlap does not match enough to tell).  Both as ZNCC of the volumes' differences along x (circular:
    ``v(x + 1) - v(x)``), not of the volumes: what a cropped volume brings in shares the
    reference's brightness profile along the other axes (the layers' depth, a vignette) but
    not its texture, and the differences keep the texture only.  The circular correlation of
    the differences is the volumes' weighted by ``|exp(2 pi i kx / X) - 1| ** 2``, less the
    terms of the last column (``v(0) - v(X - 1)``: the seam, which matched itself in cropped
    volumes); the overlap's is summed directly (:func:`cube_sums` on the GPU, else
    :func:`linear_sums`)."""
    xp = array_module_of(volume)
    shape = tuple(int(n) for n in volume.shape)
    lag = [int(v) for v in lag]
    (rlo, rhi), (mlo, mhi) = _boxes(shape, lag)
    n = float(np.prod([h - l for l, h in zip(rlo, rhi)]))
    w = float(np.prod(shape)) - n
    if w < WRAP_VOXELS or n < WRAP_VOXELS:
        return None
    kx = np.arange(product.shape[-1])
    weight = xp.asarray((2.0 - 2.0 * np.cos(2 * np.pi * kx / shape[2])).astype(np.float32))
    circ = float(to_numpy(samples3d(product * weight, shape,
                                    np.asarray(lag, np.float64)[None], 1.0, 1,
                                    nyquist=True)).ravel()[0])
    ends = np.minimum(np.abs(lag) + 1, np.asarray(shape))
    gr = reference.differences(ends)
    dv = differences(centred(volume))
    circ -= _seam_terms(gr[0], gr[3], dv, lag)
    dv[..., -1] = 0.0
    gm = (VolumeSums(dv, ends), VolumeSums(dv, ends, "squares"))
    lag = tuple(lag)
    # (on the GPU the overlap sums' kernel: linear_sums' strided products and sums of thin
    # boxes were some 20 CuPy kernels compiled at first use, most of a cold run)
    inside = float(cube_sums(gr[0], dv, np.asarray(lag), None, [lag])[lag]) \
        if xp is not np else float(linear_sums(gr[0], dv, [lag], [circ])[0])
    sums = []
    for part in ("overlap", "wrapped"):
        sr, er = (s.box(rlo, rhi) for s in gr[1:3])
        sm, em = (s.box(mlo, mhi) for s in gm)
        c, count = inside, n
        if part == "wrapped":
            sr, er = gr[1].total - sr, gr[2].total - er
            sm, em = gm[0].total - sm, gm[1].total - em
            c, count = circ - inside, w
        vr, vm = er - sr * sr / count, em - sm * sm / count
        sums.append((c - sr * sm / count) / np.sqrt(vr * vm) if vr > 0 and vm > 0 else np.nan)
    overlap, wrapped = sums
    if not overlap >= WRAP_MIN_CORRELATION:
        return np.nan
    return float(wrapped / overlap)


def differences(values):
    """``v(x + 1) - v(x)`` along x, circular (the last column: ``v(0) - v(X - 1)``)."""
    xp = array_module_of(values)
    out = xp.empty_like(values)
    xp.subtract(values[..., 1:], values[..., :-1], out=out[..., :-1])
    xp.subtract(values[..., 0], values[..., -1], out=out[..., -1])
    return out


def _seam_terms(ref, seam, vol, lag):
    """The terms of ``sum R((x + lag) mod N) M(x)`` (the differences) in which either side's
    last column takes part: ``ref`` the reference's with its last column zeroed, ``seam`` that
    column, ``vol`` the volume's whole; one float."""
    xp = array_module_of(vol)
    lz, ly, lx = lag
    x = vol.shape[2]

    def ref_column(c):  # (the reference's column c, moved by the lag in z and y)
        plane = seam if c == x - 1 else ref[..., c]
        return xp.roll(plane, (-lz, -ly), axis=(0, 1))

    t1 = total64(vol[..., x - 1] * ref_column((x - 1 + lx) % x))
    if lx % x == 0:
        return float(t1)
    t2 = total64(vol[..., (x - 1 - lx) % x] * ref_column(x - 1))
    return float(t1) + float(t2)  # (two host floats: a CuPy add compiles at first use)


class WrapVote:
    """``boundary="auto"``'s decision, over the stack's first :data:`WRAP_VOLUMES` volumes
    whose wrapped-around part is large enough to tell (:func:`wrap_ratio`): wrap-around
    where the median of their ratios (those whose overlap matches enough) is at least
    :data:`WRAP_SHARE`; cropped where none tells.  Until it is decided the volumes are
    refined both ways."""

    def __init__(self):
        self.tried, self.ratios = 0, []

    @property
    def decided(self) -> bool:
        return self.tried >= WRAP_VOLUMES

    @property
    def wraps(self) -> bool:
        return bool(self.ratios) and float(np.median(self.ratios)) >= WRAP_SHARE

    def final(self) -> "WrapVote":
        """This vote as the run's decision, decided even where fewer volumes told (a stack
        measured in parts: every part refined only the way the whole stack's vote chose)."""
        done = WrapVote()
        done.tried, done.ratios = max(self.tried, WRAP_VOLUMES), list(self.ratios)
        return done

    def add(self, reference, volume, product, lag):
        """Count the volume's :func:`wrap_ratio` at ``lag`` (until decided)."""
        if self.decided:
            return
        r = wrap_ratio(reference, volume, product, lag)
        if r is not None:
            self.tried += 1
            if np.isfinite(r):
                self.ratios.append(float(r))


def circular_start(product, shape, coarse, bounds):
    """The best integer shift of the circular correlation of ``product`` (1, Z, Y, X//2+1)
    (the volumes' own, not their periodic components'; volumes of ``shape``) among
    ``coarse`` and its 26 neighbours within ``max_shift``: where a wrap-around volume's
    refinement starts."""
    bounds = (None,) * 3 if bounds is None else tuple(bounds)
    centre = np.asarray(coarse, np.int64)
    grid = to_numpy(samples3d(product, shape, centre.astype(np.float64)[None], 1.0, 3,
                              nyquist=True))[0].ravel()
    lags = [tuple(int(v) for v in centre + o)
            for o in OFFSETS]
    best = max((i for i, l in enumerate(lags) if _allowed(l, shape, bounds)),
               key=lambda i: grid[i])
    return np.array(lags[best], np.int64)
