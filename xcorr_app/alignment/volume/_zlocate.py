"""The depth of each frame of a 2-D movie in a reference z-stack: :func:`zlocate`.

Every frame is correlated with every plane (an n-to-m correlation, by ``rfft2`` over a chunk
of frames times the planes' conjugate spectra): the best plane and the frame's integer (dy,
dx) come from the highest normalized correlation within ``max_shift``; the shift is refined
on that plane (:func:`~xcorr_app.registration.refine_upsampled`); then the frame, moved by
that subpixel shift (a Fourier shift), is compared with every plane over its own region (the
wrapped edge left out): the normalized correlations are the depth profile, whose peak is
placed between the best plane and a neighbour:

- ``subplane="projection"`` (default): the frame projected (least squares) onto the two
  planes, ``alpha A + beta B``, from the correlations and the planes' own inner products;
  the depth is ``beta / (alpha + beta)`` of the way from A to B: exact for a frame that is
  the planes' linear interpolation, whatever the profile's shape;
- ``subplane="parabola"``: the vertex of a parabola through the best plane and its two
  neighbours; biased where the profile is broad and lopsided (up to 0.23 plane, 0.11 RMS
  on noise-free frames of tests/alignment/volume/test_zlocate.py's stacks, against 0.001
  for the projection; 0.06-0.08 against 0.13 RMS at 100 photons).

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> zstack = ndi.gaussian_filter(np.random.default_rng(0).random((9, 32, 32)), 1.5)
>>> frames = np.stack([zstack[3], 0.75 * zstack[5] + 0.25 * zstack[6]])
>>> r = zlocate(frames, zstack, max_shift=4, device="cpu")
>>> r.plane.tolist(), np.round(r.depth, 1).tolist()
([3, 5], [3.0, 5.2])
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

import numpy as np

from ...backend import compute_device, xp_for
from ...correlate import fft_of
from ...errors import InputError
from ..rigid import check_gpu_float32
from ...registration import DEFAULT_UPSAMPLE, refine_upsampled
from ._api import fitting_chunk, parse_upsample
from ._dft3 import window_lags
from ._source import open_volumes

#: bytes per (frame, plane) pixel of a chunk: the cross spectra, the surfaces, their window
PER_PAIR_PIXEL = 16
ZLOCATE_COLUMNS = ("frame", "depth", "plane", "dy", "dx", "score", "confidence", "at_edge")


@dataclass
class ZlocateResult:
    """Per frame: ``depth`` (planes, subplane), the best whole ``plane``, ``shifts`` (dy, dx)
    that move the frame onto that plane, ``score`` (normalized correlation there),
    ``confidence`` (``1 - second / score``, ``second`` the best score two or more planes
    away) and ``at_edge`` (best plane first or last: no depth beyond it); ``profile``
    (N, Z) every plane's normalized correlation with the aligned frame over its region.
    A constant frame has nothing to locate: depth, shifts, score and profile NaN, plane -1,
    confidence 0."""

    depth: np.ndarray
    plane: np.ndarray
    shifts: np.ndarray
    score: np.ndarray
    confidence: np.ndarray
    at_edge: np.ndarray
    profile: np.ndarray
    notes: list = field(default_factory=list)
    device: str = "cpu"

    def to_csv(self) -> str:
        """The table as CSV text: :data:`ZLOCATE_COLUMNS`."""
        buf = io.StringIO()
        out = csv.writer(buf, lineterminator="\n")
        out.writerow(ZLOCATE_COLUMNS)
        for i in range(len(self.depth)):
            plane = int(self.plane[i])  # (-1: a constant frame, no plane; "nan" as its depth)
            out.writerow([i, f"{self.depth[i]:.6f}", plane if plane >= 0 else "nan",
                          f"{self.shifts[i, 0]:.6f}", f"{self.shifts[i, 1]:.6f}",
                          f"{self.score[i]:.6f}", f"{self.confidence[i]:.6f}",
                          bool(self.at_edge[i])])
        return buf.getvalue()


def _xy_bound(max_shift):
    if max_shift is None:
        return (None, None)
    values = (max_shift,) * 2 if np.ndim(max_shift) == 0 else tuple(max_shift)
    if len(values) != 2 or any(isinstance(v, bool) or v is None or float(v) != int(v)
                               or int(v) < 0 for v in values):
        raise InputError(f"max_shift {max_shift!r}: give one whole number >= 0 or two "
                         "(dy, dx)")
    return tuple(int(v) for v in values)


def _centred(xp, images):
    """``(images less their means, their root sums of squares)``: the norm exactly 0 for a
    constant image (its float64 mean is exact)."""
    v = xp.asarray(images, dtype=xp.float32)
    v = v - v.mean(axis=(-2, -1), keepdims=True, dtype=xp.float64).astype(xp.float32)
    return v, xp.sqrt((v.astype(xp.float64) ** 2).sum(axis=(-2, -1)))


def _chunk(n, planes, h, w, xp, memory_limit):
    return fitting_chunk(n, 12 * planes * h * w,  # the planes, their spectra
                         PER_PAIR_PIXEL * planes * h * w, 64, xp, memory_limit,
                         f"a frame against {planes} planes of {h}x{w} needs about {{}} MiB",
                         "crop or bin them")


def _aligned(xp, spec, shifts, h, w):
    """The frames of half spectra ``spec`` (B, H, W//2+1) moved by ``shifts`` (B, 2) onto
    their plane (a Fourier shift: their content wraps around; :func:`_masks` leaves it out)."""
    s = xp.asarray(shifts)
    fy, fx = xp.asarray(np.fft.fftfreq(h)), xp.arange(w // 2 + 1) / w
    ramp = (xp.exp(-2j * np.pi * s[:, 0, None, None] * fy[None, :, None])
            * xp.exp(-2j * np.pi * s[:, 1, None, None] * fx[None, None, :]))
    return fft_of(xp).irfft2(spec * ramp.astype(spec.dtype), s=(h, w)).astype(xp.float64)


def _masks(xp, shifts, h, w):
    """(B, H, W) float64: 1 where the frame moved by its shift has content of its own (a
    margin of ``ceil(|shift|) + 1`` px left out on every side: the wrapped edge)."""
    m = np.ceil(np.abs(np.asarray(shifts))).astype(np.int64) + 1
    m = np.minimum(m, [(h - 2) // 2, (w - 2) // 2])
    rows, cols = np.arange(h), np.arange(w)
    inside = ((rows[None, :, None] >= m[:, 0, None, None])
              & (rows[None, :, None] < h - m[:, 0, None, None])
              & (cols[None, None, :] >= m[:, 1, None, None])
              & (cols[None, None, :] < w - m[:, 1, None, None]))
    return xp.asarray(inside, dtype=xp.float64)


class _Overlap:
    """Covariances over each frame's own region (:func:`_masks`): frame with every plane
    (``cov`` (B, Z)), the frame's and the planes' variances, and of two planes on demand."""

    def __init__(self, xp, frames, planes, mask):
        self.xp, self.planes, self.mask = xp, planes, mask
        self.count = mask.sum(axis=(1, 2))                                      # (B,)
        wf = mask * frames
        sf = wf.sum(axis=(1, 2))
        self.sp = xp.einsum("bhw,zhw->bz", mask, planes)
        self.cov = (xp.einsum("bhw,zhw->bz", wf, planes)
                    - sf[:, None] * self.sp / self.count[:, None])
        self.var_f = (wf * frames).sum(axis=(1, 2)) - sf ** 2 / self.count
        self.var_p = (xp.einsum("bhw,zhw->bz", mask, planes ** 2)
                      - self.sp ** 2 / self.count[:, None])

    def profile(self):
        """The normalized correlation (B, Z) of each frame with every plane."""
        xp = self.xp
        den = xp.sqrt(xp.maximum(self.var_f[:, None] * self.var_p, 1e-300))
        return _np(self.cov / den)

    def pair(self, a, b):
        """The covariance of planes ``a`` and ``b`` (B,) over each frame's region."""
        xp = self.xp
        a, b, rows = xp.asarray(a), xp.asarray(b), xp.arange(len(a))
        prod = xp.einsum("bhw,bhw->b", self.mask, self.planes[a] * self.planes[b])
        return _np(prod - self.sp[rows, a] * self.sp[rows, b] / self.count)


def _vertex(cm, c0, cp):
    den = cm - 2.0 * c0 + cp
    with np.errstate(divide="ignore", invalid="ignore"):
        v = np.where(den < 0, 0.5 * (cm - cp) / den, 0.0)
    return np.clip(v, -0.5, 0.5)


SUBPLANE = ("projection", "parabola")


def _pair_fit(overlap, cov, var_p, a):
    """The frame's least-squares fit by planes ``a`` and ``a + 1``: the fraction of the way
    from ``a`` (``beta / (alpha + beta)``, 0..1) and the variance it leaves unexplained."""
    rows = np.arange(len(a))
    b = a + 1
    fa, fb = cov[rows, a], cov[rows, b]
    aa, bb, ab = var_p[rows, a], var_p[rows, b], overlap.pair(a, b)
    det = aa * bb - ab * ab
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = (bb * fa - ab * fb) / det
        beta = (aa * fb - ab * fa) / det
        ok = (det > 0) & (alpha + beta > 0)
        f = np.where(ok, beta / (alpha + beta), 0.0)
        explained = np.where(det > 0, alpha * fa + beta * fb, 0.0)
    return np.clip(np.nan_to_num(f), 0.0, 1.0), -np.nan_to_num(explained, nan=-np.inf)


def _projection(overlap, profile, best, nz):
    """Depths between each frame's best plane and a neighbour (least squares over the
    frame's region: the module docstring): the better-correlated neighbour (robust to
    noise), or the other one where that pair puts the frame on the best plane itself."""
    cov, var_p = _np(overlap.cov), _np(overlap.var_p)
    rows = np.arange(len(best))
    below = np.clip(best - 1, 0, nz - 2)  # the pair (best - 1, best), or the first pair
    above = np.clip(best, 0, nz - 2)      # (best, best + 1), or the last pair
    f_below, _ = _pair_fit(overlap, cov, var_p, below)
    f_above, _ = _pair_fit(overlap, cov, var_p, above)
    d_below, d_above = below + f_below, above + f_above
    up = profile[rows, np.minimum(best + 1, nz - 1)]
    down = profile[rows, np.maximum(best - 1, 0)]
    prefer_up = (best == 0) | ((best < nz - 1) & (up >= down))
    first, other = np.where(prefer_up, d_above, d_below), np.where(prefer_up, d_below, d_above)
    return np.where(first == best, other, first)


def zlocate(movie, zstack, max_shift=None, upsample=DEFAULT_UPSAMPLE, subplane="projection",
            device="auto", memory_limit=None, progress=None):
    """The depth of each frame of ``movie`` in ``zstack``, between planes.

    Parameters
    ----------
    movie : (N, Y, X) array_like or path
    zstack : (Z, Y, X) array_like or path
        The reference planes, in order of depth, registered to each other; Z >= 3 for a
        subplane depth.
    max_shift : None, int or (dy, dx)
        Largest (dy, dx) of a frame against the planes, px; None: half the frame.
    upsample : float
        Subpixel refinement of the frame's shift on its best plane (1: whole pixels).
    subplane : {"projection", "parabola"}
        How the depth is placed between planes (the module docstring).
    device : {"auto", "cpu", "gpu"}
    memory_limit : int, optional
        Bytes the run may use (default: a share of the free GPU or host memory).
    progress : callable, optional
        Called with the number of frames of each chunk once it is located.

    Returns
    -------
    ZlocateResult
        A constant frame's depth and shifts NaN, plane -1.

    Raises
    ------
    InputError
        Bad arguments or data (NaN or infinite pixels, a z-stack whose planes are all
        constant), or a chunk too large for the memory.

    Examples
    --------
    >>> import numpy as np
    >>> zstack = np.random.default_rng(4).random((5, 16, 16))
    >>> zlocate(zstack[[4, 1]], zstack, device="cpu").plane.tolist()
    [4, 1]
    """
    frames = open_volumes(movie, ndim=3, what="(N, Y, X)")
    planes = open_volumes(zstack, ndim=3, what="(Z, Y, X)")
    planes.name = "the z-stack" if planes.name == "the stack" else planes.name
    if frames.shape[1:] != planes.shape[1:]:
        raise InputError(f"frames of {frames.shape[1]}x{frames.shape[2]} and planes of "
                         f"{planes.shape[1]}x{planes.shape[2]}: they need the same size")
    bounds = _xy_bound(max_shift)
    if subplane not in SUBPLANE:
        raise InputError(f"unknown subplane {subplane!r}; use one of {', '.join(SUBPLANE)}")
    if planes.shape[0] < 2:
        raise InputError(f"{planes.name} has {planes.shape[0]} plane; a depth needs 2 or more")
    upsample = parse_upsample(upsample)
    dev = compute_device(frames.data, planes.data, device=device)
    if dev == "gpu":
        for part in (frames, planes):
            if np.dtype(part.data.dtype) == np.float32:
                check_gpu_float32(part.data[0], part.name)
    xp = xp_for(dev)
    fft = fft_of(xp)
    (n, h, w), nz = frames.shape, planes.shape[0]
    chunk = _chunk(n, nz, h, w, xp, memory_limit)
    # one scale for all planes (the depth weighs two planes against each other), one a frame
    plane_img, plane_norm = _centred(xp, planes.read(0, nz, xp, scale="all"))
    if not bool((plane_norm > 0).any()):
        raise InputError(f"every plane of {planes.name} is constant: there is no pattern to "
                         "locate frames by")
    plane_norm = xp.maximum(plane_norm, 1e-30)  # (a constant plane: correlation 0)
    plane_spec = fft.rfft2(plane_img)
    planes64 = plane_img.astype(xp.float64)
    lags = [window_lags(size, b) for size, b in zip((h, w), bounds)]
    depth, best, constant = np.zeros(n), np.zeros(n, np.int64), np.zeros(n, bool)
    shifts, profile = np.zeros((n, 2)), np.zeros((n, nz))
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        img, norm = _centred(xp, frames.read(start, stop, xp, scale="each"))
        constant[start:stop] = _np(norm) == 0  # (nothing to locate: NaN below)
        norm = xp.maximum(norm, 1e-30)
        spec = fft.rfft2(img)
        product = plane_spec[None] * xp.conj(spec)[:, None]                  # (B, Z, H, Wh)
        surf = fft.irfft2(product, s=(h, w))
        for axis, lag in zip((-2, -1), lags):
            surf = xp.take(surf, xp.asarray(lag % surf.shape[axis]), axis=axis)
        b = stop - start
        flat = surf.reshape(b, nz, -1) / (norm[:, None, None] * plane_norm[None, :, None])
        top = flat.max(axis=2)                                                # (B, Z)
        k = xp.argmax(top, axis=1)
        idx = xp.argmax(flat[xp.arange(b), k], axis=1)
        iy, ix = xp.unravel_index(idx, surf.shape[-2:])
        coarse = np.stack([lags[0][_np(iy)], lags[1][_np(ix)]], axis=1).astype(np.float64)
        del surf, flat
        # linear: frames cut from a scene (circular: 0.25 px RMS off on the test's frames)
        fine = refine_upsampled(plane_img[k], img, coarse, upsample, boundary="linear")
        fine = np.where(np.abs(_np(fine) - coarse) <= 1.0, _np(fine), coarse)
        del product
        overlap = _Overlap(xp, _aligned(xp, spec, fine, h, w), planes64, _masks(xp, fine, h, w))
        prof = overlap.profile()
        best = prof.argmax(axis=1)
        if subplane == "parabola":
            rows = np.arange(len(best))
            lo, hi = np.clip(best - 1, 0, nz - 1), np.clip(best + 1, 0, nz - 1)
            depth[start:stop] = best + np.where((best > 0) & (best < nz - 1), _vertex(
                prof[rows, lo], prof[rows, best], prof[rows, hi]), 0.0)
        else:
            depth[start:stop] = _projection(overlap, prof, best, nz)
        shifts[start:stop], profile[start:stop] = fine, prof
        del overlap
        if progress is not None:
            progress(stop - start)
    best = profile.argmax(axis=1)
    rows = np.arange(n)
    inner = (best > 0) & (best < nz - 1)
    score = profile[rows, best]
    far = np.abs(np.arange(nz)[None] - best[:, None]) >= 2
    second = np.where(far, profile, -np.inf).max(axis=1) if nz > 2 else np.zeros(n)
    second = np.where(np.isfinite(second), np.maximum(second, 0.0), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        confidence = np.where(score > 0, np.clip(1.0 - second / score, 0.0, 1.0), 0.0)
    at_edge = ~inner & ~constant
    # constant frames: no depth nor shift (NaN, plane -1), as 2-D align's constant frames
    depth[constant], best[constant], shifts[constant] = np.nan, -1, np.nan
    score[constant], confidence[constant], profile[constant] = np.nan, 0.0, np.nan
    notes = [f"{n} frame(s) against {nz} plane(s) of {h}x{w} on the {dev.upper()}, "
             f"{chunk} frame(s) per chunk", f"subplane depth by {subplane}"]
    if constant.any():
        notes.append(f"{int(constant.sum())} constant frame(s): depth and shift undefined "
                     "(NaN, plane -1), confidence 0")
    if at_edge.any():
        notes.append(f"{int(at_edge.sum())} frame(s) best match the first or last plane: "
                     "their depth may lie beyond the z-stack")
    return ZlocateResult(depth, best, shifts, score, confidence, at_edge, profile, notes, dev)


def _np(a):
    return a.get() if hasattr(a, "get") else np.asarray(a)
