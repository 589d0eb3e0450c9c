"""The rotation of frames measured from a 3x3 grid of patches, one definition on both devices:
the quality report's probe of every aligned frame (:class:`RotationProbe`) and the rigid-body
model's measurement (:func:`rigid_body_part`; the run's pass:
:mod:`xcorr_app.alignment._rotation`).

Every patch of the frame is measured against the same patch of the template (ZNCC within a
few pixels, the patch pass's :func:`~._patches.patch_shifts`), and the rigid-body displacement
``s(q) = q - c - R(-phi) (q - c) + t`` (:mod:`xcorr_app.alignment.warp._rigid_body`) is
fitted to the patch shifts by least squares (:func:`fit_rigid_body`: linear in ``sin phi``, ``cos
phi`` and ``t``, so a change of scale does not pass for a rotation; each patch weighted by its
texture).  Patches and a fit rather than the log-polar transform of the spectra: the patch
pass's measurement is there on both devices and sees the frames as the run does (prefilter,
template), and the fit's residual says how far the angle can be trusted.

Examples
--------
>>> u = np.array([[-10.0, -10.0], [-10.0, 10.0], [10.0, -10.0], [10.0, 10.0]])
>>> phi = np.deg2rad(2.0)
>>> back = np.array([[np.cos(phi), np.sin(phi)], [-np.sin(phi), np.cos(phi)]])
>>> s = u - u @ back.T + [1.5, -0.5]  # the displacement of 2 degrees and a shift
>>> a, t, se = fit_rigid_body(s[None], u, np.ones((1, 4), bool), np)
>>> round(float(np.rad2deg(a[0])), 6), t[0].round(6).tolist()
(2.0, [1.5, -0.5])
"""

from __future__ import annotations

import numpy as np

from ... import backend
from ..._cuda import KernelFamily
from ...io import FrameRange
from ...streaming import DeviceChunks, host_copies
from ..warp import corner_displacement, rigid_body_field
from ._patch_pass import patch_preparer
from ._patches import (PatchGrid, patch_left, patch_shifts, refine_shifts, refine_taper,
                       refine_template, template_patches)
from ._spline import field_weights

__all__ = ["ROTATED_PX", "ROTATED_SIGNIFICANCE", "RotationProbe", "rotated_frames",
           "fit_rigid_body",
           "structure_tensors", "rigid_body_at", "probe_grid", "rigid_body_part", "WholeFrame",
           "whole_frame_steps", "rigid_body_mean_part", "whole_frame_part", "grid_box",
           "rigid_body_weights",
           "WHOLE_FRAME_STEPS", "WHOLE_FRAME_MAX_PX"]

#: a frame whose corners may be more than this (px) off once aligned by a shift is flagged
#: ``rotated``...
ROTATED_PX = 0.5
#: ... where the rotation the probe estimates moves them by more than it less this margin
#: (px: the estimate's own error, about 0.1 px at the corners of 128 px frames, its bias: the
#: patches' subpixel fit pulls displacements under a pixel toward whole pixels and the angles
#: of the frames left unflagged read 10-30% low, and the shift's error at the corners; the
#: bench's rotating stacks, seeds 0-4, left 14 of 1133 frames over 0.5 px unflagged at 0.15,
#: 6 at 0.2, with 14 and 16 of the 4394 frames of the stacks that do not rotate flagged)...
ROTATED_MARGIN = 0.2
#: ... and where its angle is also this many standard errors away from 0 (noise alone does
#: not flag a frame; the error: the frame's fit's, at least the median of the stack's
#: frames', as nine patches' residuals estimate it loosely)
ROTATED_SIGNIFICANCE = 3.0
#: the probe's patches: a third of the area's side, at most this many px (the cost is the
#: patches' pixels, the angle's precision their lever arm: the grid spans the area anyway)
PROBE_SIDE = 40
#: the probe's search around the frame's rigid shift (px): a rotation that moves the corner
#: patches farther still shows, their peaks on the border of the search
PROBE_DEVIATION = 4
#: the rigid-body model's refinements through the fitted transform (:func:`rigid_body_part`)
RIGID_BODY_REFINES = 2
#: then Gauss-Newton steps of the whole frame against the frames' mean
#: (:func:`whole_frame_steps`: nine patches of a dim, smooth scene measure the angle loosely),
#: and the most they may move the patches' fit at the frame's corners (px)
WHOLE_FRAME_STEPS = 2
WHOLE_FRAME_MAX_PX = 1.0
#: a patch this far (px, weighted by its texture) from the fit, and farther than 3 robust
#: deviations of the patches', is left out and the fit made again (a patch without texture,
#: a moving object)
OUTLIER_PX = 0.5
#: the fewest patches a fit takes
MIN_PATCHES = 3
GRID = (3, 3)
#: the patches' subpixel fit where the run's is none (an integer shift a patch would make the
#: angle of a still frame jump) or the upsampled DFT (not used by the patches)
FIT_SUBPIXEL = "gaussian"
FITS = ("gaussian", "parabolic", "gaussian3", "parabolic3")


#: kernels/alignment/rigid_body_fit.cu: :func:`fit_rigid_body` on the GPU, a frame a thread
#: (weights given, or made of the patches' peaks), for the 3x3 grid's patches (others: on the
#: host)
FIT_THREADS = 128
FIT_PATCHES = (9,)
RIGID_BODY_FIT = KernelFamily("rigid_body_fit.cu", "rigid_body_fit",
                              [(p, peaks, FIT_THREADS) for p in FIT_PATCHES
                               for peaks in (False, True)])


def peak_weights(peak, xp):
    """(N, P): each patch's weight from its correlation peak ``peak`` ``(N, P)`` (ZNCC): the
    signal-to-noise ratio ``rho / (1 - rho)`` of two noisy views of one scene (a patch of noise
    that peaked at 0.3 counts for a fiftieth of a textured one at 0.95), 0 where it is not a
    number."""
    rho = xp.clip(xp.nan_to_num(xp.asarray(peak, xp.float64), nan=0.0), 0.0, 0.999)
    return rho / (1.0 - rho)


def fit_rigid_body(values, u, usable, xp, tensors=None, peaks=False):
    """``(phi, t, se)``: the rotation (radians), shift ``(N, 2)`` and their standard errors
    ``(N, 3)`` (of ``phi``, ``ty``, ``tx``) of the rigid-body displacement fitted to
    ``values`` ``(N, P, 2)``, the displacement measured at the patch centres ``u`` ``(P, 2)``
    (relative to the frame's centre), of the patches ``usable`` ``(N, P)`` (bool, or each
    patch's weight, :func:`peak_weights`; 0 or False: left out, NaN or not).

    Least squares, linear in ``(sin phi, cos phi, ty, tx)``, each patch's residual weighted by
    its ``tensors`` ``(P, 2, 2)`` (:func:`structure_tensors`: a patch without texture counts
    for nothing, an edge only across itself; default: all alike); a patch far from the fit
    (:data:`OUTLIER_PX`, and 3 robust deviations of the others) is left out and the fit made
    again, twice.  NaN for a frame with fewer than :data:`MIN_PATCHES` patches.  On ``xp``'s
    device; nothing waits for it.  ``peaks``: ``usable`` holds the patches' correlation peaks,
    weighted by :func:`peak_weights` (a patch whose value is not a number weighs 0).

    On the GPU, one thread a frame (``kernels/alignment/rigid_body_fit.cu``): the same fits in
    double, by Cholesky in place of LAPACK's LU (CuPy's batched solve imports cupyx, and the
    host's fit took most of a GPU run's quality report); NaN for a frame whose system is not
    positive definite (LAPACK refuses the whole batch)."""
    if xp is not np:
        return _fit_on_gpu(values, u, usable, tensors, peaks)
    if peaks:
        usable = peak_weights(usable, np)
    u = xp.asarray(u, xp.float64)
    p = u.shape[0]
    uy, ux = u[:, 0], u[:, 1]
    one, zero = xp.ones(p), xp.zeros(p)
    a = xp.stack([xp.stack([-ux, -uy, one, zero], -1), xp.stack([uy, -ux, zero, one], -1)],
                 1)  # (P, 2, 4): the rows of each patch
    j = xp.broadcast_to(xp.eye(2), (p, 2, 2)) if tensors is None \
        else xp.asarray(tensors, xp.float64)
    b = xp.einsum("pki,pkl,plj->pij", a, j, a)
    c = xp.einsum("pki,pkl->pil", a, j)
    values = xp.asarray(values, xp.float64)
    # (a patch whose value is not a number weighs nothing, as on the GPU)
    w = xp.where(xp.isfinite(values).all(-1), xp.asarray(usable).astype(xp.float64), 0.0)
    y = xp.where(w[..., None] > 0, values - u[None], 0.0)
    eye = xp.eye(4)
    flat_b, flat_a = b.reshape(p, 16), a.reshape(2 * p, 4).T
    # (each axis of 2 written out and the sums over patches as matrix products: NumPy's
    # einsum of three operands, and its reductions over short last axes, took most of the fit)
    y0, y1 = y[..., 0], y[..., 1]
    cy = c[None, :, :, 0] * y0[..., None] + c[None, :, :, 1] * y1[..., None]  # (N, P, 4)
    j00, j01, j11 = j[:, 0, 0], j[:, 0, 1] + j[:, 1, 0], j[:, 1, 1]
    for k in range(3):
        count = (w > 0).sum(1)
        ok = count >= MIN_PATCHES
        m = xp.where(ok[:, None, None], (w @ flat_b).reshape(-1, 4, 4), eye)
        x = xp.linalg.solve(m, (w[:, None, :] @ cy).transpose(0, 2, 1))[:, :, 0]
        fit = (x @ flat_a).reshape(-1, p, 2)
        r0, r1 = y0 - fit[..., 0], y1 - fit[..., 1]
        q = j00 * r0 * r0 + j01 * r0 * r1 + j11 * r1 * r1  # (each residual's weighted square)
        if k == 2:
            break
        dist = xp.sqrt(xp.maximum(q, 0.0))
        ordered = xp.sort(xp.where(w > 0, dist, xp.inf), axis=1)
        median = xp.take_along_axis(ordered, (xp.maximum(count, 1) - 1)[:, None] // 2, 1)[:, 0]
        far = (w > 0) & (dist > xp.maximum(OUTLIER_PX, 3.0 * 1.4826 * median)[:, None])
        keep = (count - far.sum(1)) >= max(MIN_PATCHES, 5)
        w = xp.where(far & keep[:, None], 0.0, w)
    dof = xp.maximum(2 * count - 4, 1)
    s2 = (w * q).sum(1) / dof
    var = s2[:, None] * xp.diagonal(xp.linalg.inv(m), axis1=1, axis2=2)
    se = xp.sqrt(xp.maximum(var[:, [0, 2, 3]], 0.0))
    se[:, 0] /= xp.maximum(xp.hypot(x[:, 0], x[:, 1]), 1e-12)
    phi = xp.arctan2(x[:, 0], x[:, 1])
    nan = xp.asarray(float("nan"))
    return (xp.where(ok, phi, nan), xp.where(ok[:, None], x[:, 2:4], nan),
            xp.where(ok[:, None], se, nan))


def _fit_on_gpu(values, u, usable, tensors, peaks, packed=False):
    """:func:`fit_rigid_body` by :data:`RIGID_BODY_FIT` (CuPy or NumPy in, CuPy out; another
    count of patches than :data:`FIT_PATCHES` on the host); ``packed``: one ``(N, 6)`` array,
    ``phi``, ``t`` and ``se`` side by side."""
    import cupy as cp

    n, p = values.shape[:2]
    if p not in FIT_PATCHES:
        got = fit_rigid_body(*(backend.to_numpy(a) for a in (values, u, usable)), np,
                             None if tensors is None else backend.to_numpy(tensors), peaks)
        return cp.asarray(np.column_stack(got)) if packed else tuple(cp.asarray(a) for a in got)
    # (host arrays made float64 and contiguous on the host: CuPy's conversion is a kernel it
    # compiles on a first run)
    values, weights = (cp.asarray(np.ascontiguousarray(a, np.float64)) if isinstance(a, np.ndarray)
                       else cp.ascontiguousarray(cp.asarray(a), cp.float64)
                       for a in (values, usable))
    if tensors is None:
        tensors = np.broadcast_to(np.eye(2), (p, 2, 2))
    u = cp.asarray(np.ascontiguousarray(backend.to_numpy(u), np.float64))
    tensors = cp.asarray(np.ascontiguousarray(backend.to_numpy(tensors), np.float64))
    out = cp.empty((n, 6), cp.float64)
    if n:
        RIGID_BODY_FIT.get(p, bool(peaks), FIT_THREADS)(
            (-(-n // FIT_THREADS),), (FIT_THREADS,),
            (values, weights, u, tensors, np.int64(n), np.float64(OUTLIER_PX),
             np.int32(MIN_PATCHES), np.int32(max(MIN_PATCHES, 5)), out))
    return out if packed else (out[:, 0], out[:, 1:3], out[:, 3:6])


def structure_tensors(patches, xp):
    """``(P, 2, 2)`` float64: each patch's structure tensor (the sums of its gradient's
    products, ``[[gy gy, gy gx], [gx gy, gx gx]]``: how precisely its shift is measured along
    each direction), divided by the patches' mean of half its trace (a patch of the typical
    texture weighs about 1)."""
    f = xp.asarray(patches, xp.float64)
    gy = f[:, 2:, 1:-1] - f[:, :-2, 1:-1]
    gx = f[:, 1:-1, 2:] - f[:, 1:-1, :-2]
    yy, xx, yx = ((g * h).sum((1, 2)) for g, h in ((gy, gy), (gx, gx), (gy, gx)))
    t = xp.stack([xp.stack([yy, yx], -1), xp.stack([yx, xx], -1)], -2)
    scale = (yy + xx).mean() / 2.0
    return t / scale if float(scale) > 0 else t


def rigid_body_at(points, phi, t, frame_shape, xp):
    """``(N, P, 2)``: the displacement of rotations ``phi`` (N,) and shifts ``t`` (N, 2) at
    ``points`` ``(P, 2)`` (frame pixels), on ``xp``'s device."""
    h, w = frame_shape
    u = xp.asarray(points, xp.float64) - xp.asarray([(h - 1) / 2.0, (w - 1) / 2.0])
    c, s = xp.cos(phi)[:, None], xp.sin(phi)[:, None]
    ry = c * u[None, :, 0] + s * u[None, :, 1]  # R(-phi) u
    rx = -s * u[None, :, 0] + c * u[None, :, 1]
    return xp.stack([u[None, :, 0] - ry + t[:, None, 0], u[None, :, 1] - rx + t[:, None, 1]],
                    -1)


def probe_grid(area_shape):
    """The :class:`~._patches.PatchGrid` of the probe on an area of
    ``area_shape`` (3x3 patches of a third of its side, at most :data:`PROBE_SIDE` px,
    spread from edge to edge :data:`PROBE_DEVIATION` px inside it), or None where the area is
    too small for them."""
    inset = PROBE_DEVIATION  # (a rotated frame's corners bring in pixels from outside it)
    inner = [a - 2 * inset for a in area_shape]
    sizes = [min(PROBE_SIDE, a // 3) for a in inner]
    if min(sizes) < 2 * PROBE_DEVIATION + 1:
        return None
    starts = [inset + np.round(np.linspace(0, a - p, GRID[0])).astype(np.int64)
              for a, p in zip(inner, sizes)]
    return PatchGrid(GRID, tuple(sizes), (0, 0), starts[0], starts[1], PROBE_DEVIATION)


class RotationProbe:
    """Each aligned frame's rotation about the frame's centre against the template, measured
    in the quality report's pass (:func:`~._quality.measure_quality`) on the frames it holds
    aligned and prepared on the common ``area`` ``(y0, y1, x0, x1)`` of frames of
    ``frame_shape``: ``template`` is the template's area as prepared (on ``xp``'s device).
    :meth:`add` each chunk (nothing waits for the device), :meth:`columns` at the end."""

    def __init__(self, template, area, frame_shape, xp):
        self.xp, self.frame_shape = xp, tuple(frame_shape)
        y0, y1, x0, x1 = area
        self.grid = probe_grid((y1 - y0, x1 - x0))
        self.parts, self._zeros = [], {}
        if self.grid is None:
            return
        self.tpatches = template_patches(template, self.grid)
        self.left = patch_left(self.tpatches, self.grid.max_deviation)
        # (on the host: a few numbers; CuPy's reductions would import cupyx, a large share of a
        # one-shot run)
        self.tensors = structure_tensors(backend.to_numpy(self.tpatches), np)
        centres = self.grid.centres.reshape(-1, 2) + [y0, x0]
        self.u = centres - [(frame_shape[0] - 1) / 2.0, (frame_shape[1] - 1) / 2.0]

    def add(self, frames):
        """A chunk's aligned frames, prepared, on the area ``(n, y1 - y0, x1 - x0)``."""
        if self.grid is None:
            return
        xp = self.xp
        n = len(frames)
        zeros = np.zeros((n, 2))
        up = None
        if xp is not np:  # (on the device once a chunk size: a copy from the host would wait)
            up = self._zeros.get(n)
            if up is None:
                up = self._zeros[n] = (xp.zeros((n, 2), xp.int64), xp.zeros((n, 2)))
        d, peak, _, _ = patch_shifts(self.tpatches, frames, zeros, self.grid, FIT_SUBPIXEL,
                                     "cpu" if xp is np else "gpu", self.left, uploaded=up)
        # (kept apart, gathered on the host at the end: a concatenate on the device is a kernel
        # CuPy compiles on a first run, a large share of a first run's quality report)
        self.parts.append((d.reshape(n, -1), peak.reshape(n, -1)))

    def columns(self, usable):
        """``(n, 3)`` NumPy of the frames added: the rotation (degrees; NaN where not
        measured: a frame not ``usable``, too few patches, an area too small, or a frame off
        at its centre by more than half the search, whose corner patches' peaks lie on its
        border), its standard error (degrees) and 1.0 where the frame is off at its centre by
        more than half the search (its residual: ``poor``).  Which frames are ``rotated``:
        :func:`rotated_frames`, over the whole stack's columns."""
        n = len(usable)
        if self.grid is None or not self.parts:
            return np.column_stack([np.full((n, 2), np.nan), np.zeros(n)])
        xp = self.xp
        count = len(self.u)
        d, peaks = (np.concatenate(host_copies([part[k] for part in self.parts]))
                    .astype(np.float64) for k in (0, 1))
        d = d.reshape(-1, count, 2)  # (the frames are aligned: what is left)
        if xp is np:
            got = np.column_stack(fit_rigid_body(d, self.u, peaks, np, self.tensors, peaks=True))
        else:  # (the fit's (n, 6) whole: its views' copies would be kernels of their own)
            got = backend.to_numpy(_fit_on_gpu(d, self.u, peaks, self.tensors, True,
                                               packed=True))
        got[~np.asarray(usable, bool)] = np.nan
        phi, t, se = got[:, 0], got[:, 1:3], got[:, 3]
        with np.errstate(invalid="ignore"):
            off = np.hypot(*t.T) > PROBE_DEVIATION / 2
        phi = np.where(off, np.nan, phi)
        return np.column_stack([np.rad2deg(phi), np.rad2deg(se), off]).astype(np.float64)


def rotated_frames(rotation_deg, se_deg, frame_shape, relative_to=None):
    """``(rotation_deg, rotated)`` of a stack's :meth:`RotationProbe.columns` (each frame's
    rotation against the template and its standard error, degrees): with ``relative_to`` a
    frame's index, every rotation less that frame's (the template a mean of frames that turn,
    the results in that frame's place: a frame turned as the mean is not aligned), its error
    combined; and the frames ``rotated`` by enough that a corner may be :data:`ROTATED_PX` off
    (:data:`ROTATED_MARGIN`) and by :data:`ROTATED_SIGNIFICANCE` standard errors (each at
    least the stack's median: nine patches' residuals estimate it loosely).  A frame
    ``relative_to`` without a rotation: the rotations as measured.

    >>> rotated_frames(np.array([0.4, 1.0, 0.4]), np.full(3, 0.05), (128, 128), 0)
    (array([0. , 0.6, 0. ]), array([False,  True, False]))
    """
    phi = np.asarray(rotation_deg, np.float64)
    se = np.asarray(se_deg, np.float64)
    finite = np.isfinite(se)
    if finite.any():
        se = np.maximum(se, np.median(se[finite]))
    if relative_to is not None and np.isfinite(phi[relative_to]):
        phi, se = phi - phi[relative_to], np.hypot(se, se[relative_to])
    with np.errstate(invalid="ignore"):
        moved = corner_displacement(phi, frame_shape)
        rotated = (moved > ROTATED_PX - ROTATED_MARGIN) & (np.abs(phi) > ROTATED_SIGNIFICANCE * se)
    return phi, rotated


def rigid_body_weights(frame_shape, xp):
    """The spline weights (:func:`~._spline.field_weights`, on ``xp``'s device) of a rigid-body
    field, given at the frame's four corners (:func:`~..warp.rigid_body_field`)."""
    corners = np.asarray(rigid_body_field(np.zeros((1, 2)), [0.0], frame_shape)[1])
    return field_weights(corners, frame_shape, xp)


class WholeFrame:
    """What :func:`whole_frame_steps` keeps of the prepared ``template`` ``(H, W)`` over ``box``
    ``(y0, y1, x0, x1)`` of frames of ``frame_shape``, on ``xp``'s device: the columns of the
    fit (the template, ones, the two images whose blend by ``cos phi`` and ``sin phi`` is the
    derivative along the angle, and the gradient) as a float64 ``(6, K)`` matrix, their
    products (host), and the warp's corner weights."""

    def __init__(self, template, box, frame_shape, xp):
        from ...filters import gradient

        y0, y1, x0, x1 = box
        self.box, self.frame_shape, self.xp = box, tuple(frame_shape), xp
        t = xp.asarray(template, xp.float32)
        gy, gx = (g[y0:y1, x0:x1] for g in gradient(t))
        # (each pixel's place about the frame's centre, made on the host)
        uy = xp.asarray((np.arange(y0, y1) - (frame_shape[0] - 1) / 2.0).astype(np.float32))
        ux = xp.asarray((np.arange(x0, x1) - (frame_shape[1] - 1) / 2.0).astype(np.float32))
        uy, ux = uy[:, None], ux[None, :]
        # (d s / d phi = (-rx, ry) of R(-phi) u = (ry, rx): its product with the gradient is
        # cos phi * (gx uy - gy ux) + sin phi * (gy uy + gx ux))
        first = xp.subtract(xp.multiply(gx, uy), xp.multiply(gy, ux))
        second = xp.add(xp.multiply(gy, uy), xp.multiply(gx, ux))
        k = (y1 - y0) * (x1 - x0)
        basis = xp.empty((6, k), xp.float64)
        for i, image in enumerate((t[y0:y1, x0:x1], None, first, second, gy, gx)):
            if image is None:
                basis[i] = 1.0
            else:
                basis[i].reshape(y1 - y0, x1 - x0)[...] = image
        self.basis = basis
        self.gram = backend.to_numpy(basis @ basis.T)
        self.weights = rigid_body_weights(frame_shape, xp)


def whole_frame_steps(whole, frames, phi, t):
    """``(phi, t)`` (NumPy, radians and px) of the prepared ``frames`` refined by
    :data:`WHOLE_FRAME_STEPS` Gauss-Newton steps of ``frame(x - s(x)) = a * T(x + d(x)) + b``
    over :class:`WholeFrame` ``whole``'s box, ``d`` the rigid-body displacement's change (its
    derivative along the angle and the shift times the template's gradient), linear in ``a``,
    ``b`` and ``a`` times the change: every frame warped through its transform (cubic), one
    matrix product of the chunk a step.  A frame whose fit fails (a gain not above 0, a
    singular system) or whose corners it would move more than :data:`WHOLE_FRAME_MAX_PX` from
    the patches' fit keeps that fit; NaN rows stay NaN."""
    from ._motion_field import warp_chunk

    xp = whole.xp
    phi0, t0 = np.asarray(phi, np.float64).copy(), np.asarray(t, np.float64).copy()
    phi1, t1 = phi0.copy(), t0.copy()
    good = np.isfinite(phi0) & np.isfinite(t0).all(axis=1)
    if not good.any():
        return phi0, t0
    g = whole.gram
    for _ in range(WHOLE_FRAME_STEPS):
        field = rigid_body_field(np.where(good[:, None], t1, 0.0),
                                 np.rad2deg(np.where(good, phi1, 0.0)), whole.frame_shape)[0]
        moved = warp_chunk(frames, xp.asarray(field), whole.weights, resample="cubic",
                           box=whole.box)
        flat = xp.empty((len(frames), whole.basis.shape[1]), xp.float64)
        flat.reshape(moved.shape)[...] = moved
        rhs = backend.to_numpy(flat @ whole.basis.T)  # (n, 6): each frame against the columns
        c, s = np.cos(phi1), np.sin(phi1)
        for i in np.flatnonzero(good):
            # the columns T, 1, the angle's (cos * first + sin * second), gy, gx
            mix = np.zeros((5, 6))
            mix[0, 0], mix[1, 1], mix[2, 2], mix[2, 3], mix[3, 4], mix[4, 5] = \
                1.0, 1.0, c[i], s[i], 1.0, 1.0
            try:
                x = np.linalg.solve(mix @ g @ mix.T, mix @ rhs[i])
            except np.linalg.LinAlgError:
                good[i] = False
                continue
            if not (np.isfinite(x).all() and x[0] > 0):
                good[i] = False
                continue
            phi1[i] += x[2] / x[0]
            t1[i] += x[3:5] / x[0]
    moved_px = corner_displacement(np.rad2deg(phi1 - phi0), whole.frame_shape) \
        + np.hypot(*(t1 - t0).T)
    keep = good & (moved_px <= WHOLE_FRAME_MAX_PX)
    return np.where(keep, phi1, phi0), np.where(keep[:, None], t1, t0)


def grid_box(grid):
    """``(y0, y1, x0, x1)``: the span of ``grid``'s patches."""
    (ph, pw), sy, sx = grid.size, grid.starts_y, grid.starts_x
    return int(sy.min()), int(sy.max()) + ph, int(sx.min()), int(sx.max()) + pw


def rigid_body_mean_part(src, xp, start, stop, progress, *, opts, rows, chunk):
    """``(sum, count)`` ``(H, W)`` float64 (on ``xp``'s device) of frames ``start:stop``
    prepared (the patch pass's preparation) and warped bilinearly by their rigid-body ``rows``
    ``(N, 3)`` (phi radians, ty, tx; NaN rows left out): the parts of the frames' mean, the
    template of :func:`whole_frame_part`."""
    from ._motion_field import warped_sum

    prepare = patch_preparer(opts, xp)
    weights = rigid_body_weights(src.frame_shape, xp)
    total = count = None
    with DeviceChunks(FrameRange(src, start, stop), chunk, xp) as chunks:
        for first, frames in chunks:
            r = rows[start + first:start + first + len(frames)]
            ok = np.isfinite(r).all(axis=1)
            if not ok.any():
                continue
            field = rigid_body_field(r[ok, 1:3], np.rad2deg(r[ok, 0]), src.frame_shape)[0]
            frames = xp.asarray(frames)
            p = prepare(frames if ok.all() else frames[xp.asarray(np.flatnonzero(ok))])
            got = warped_sum(p.frames, xp.asarray(field), weights)
            total = got[0] if total is None else xp.add(total, got[0])
            count = got[1] if count is None else xp.add(count, got[1])
    if xp is not np:
        xp.cuda.Device().synchronize()  # (the chunks' streams)
    if total is None:
        total = count = xp.zeros(src.frame_shape)
    return total, count


def whole_frame_part(src, xp, start, stop, progress, *, opts, rows, chunk, template, box):
    """Rows ``(phi, ty, tx)`` of frames ``start:stop`` (NumPy) refined from ``rows`` by
    :func:`whole_frame_steps` against ``template`` (the frames' mean, prepared and warped:
    :func:`rigid_body_mean_part`) over ``box``."""
    prepare = patch_preparer(opts, xp)
    whole = WholeFrame(xp.asarray(template, xp.float32), box, src.frame_shape, xp)
    out = []
    with DeviceChunks(FrameRange(src, start, stop), chunk, xp) as chunks:
        for first, frames in chunks:
            r = rows[start + first:start + first + len(frames)]
            phi, t = whole_frame_steps(whole, prepare(frames).frames, r[:, 0], r[:, 1:3])
            out.append(np.column_stack([phi, t]))
    return np.concatenate(out) if out else np.zeros((0, 3))


def rigid_body_part(src, xp, start, stop, progress, *, opts, shifts, grid, chunk, template):
    """Rows ``(phi, ty, tx)`` (radians, px) of the rigid-body model of frames ``start:stop``
    (an executor's unit of work), on ``xp``'s device: the 3x3 ``grid``'s patches of each frame
    measured against ``template``'s (the image the run's last pass measured against) within
    the grid's search of the frame's rigid ``shifts``, the rotation and the shift fitted, then
    refined :data:`RIGID_BODY_REFINES` times through the fitted transform (the patch pass's
    refinement, within +-1 px).  NaN where a frame has no shift or too few patches."""
    prepare = patch_preparer(opts, xp)  # (the patch pass's: the prefilter, no window)
    t = prepare(xp.asarray(template)[None]).frames[0]
    tpatches = template_patches(t, grid)
    left = patch_left(tpatches, grid.max_deviation)
    taper = refine_taper(grid.size)
    tnear, near = refine_template(tpatches, taper)
    tensors = structure_tensors(tpatches, xp)
    weights = field_weights(grid.centres, src.frame_shape, xp)
    points = grid.centres.reshape(-1, 2)
    u = points - [(src.frame_shape[0] - 1) / 2.0, (src.frame_shape[1] - 1) / 2.0]
    dev = "cpu" if xp is np else "gpu"
    subpixel = opts.subpixel if opts.subpixel in FITS else FIT_SUBPIXEL
    rows = []
    with DeviceChunks(FrameRange(src, start, stop), chunk, xp) as chunks:
        for first, frames in chunks:
            a = start + first
            s = shifts[a:a + len(frames)]
            p = prepare(frames)
            d, peak, _, border = patch_shifts(tpatches, p.frames, s, grid, subpixel, dev, left)
            weight = peak_weights(peak, xp)
            values = d + xp.asarray(s)[:, None, :]
            ok = xp.isfinite(values).all(-1) & ~border
            phi, tt, _ = fit_rigid_body(values, u, ok * weight, xp, tensors)
            for _ in range(RIGID_BODY_REFINES):
                good = xp.isfinite(phi)
                phi0, t0 = xp.where(good, phi, 0.0), xp.where(good[:, None], tt, 0.0)
                field = rigid_body_at(points, phi0, t0, src.frame_shape, xp)
                rest = refine_shifts(tnear, p.frames, grid, field.reshape(len(s), *grid.grid, 2),
                                     weights, subpixel, dev, near, taper)
                values = field + rest
                ok = xp.isfinite(values).all(-1) & good[:, None]
                phi, tt, _ = fit_rigid_body(values, u, ok * weight, xp, tensors)
            usable = xp.asarray(np.isfinite(s).all(axis=1)) & p.finite & ~p.constant
            nan = xp.asarray(float("nan"))
            rows.append(xp.where(usable[:, None], xp.concatenate([phi[:, None], tt], 1), nan))
    if xp is not np:
        xp.cuda.Device().synchronize()  # (the chunks' streams)
    return xp.concatenate(rows) if rows else xp.zeros((0, 3))
