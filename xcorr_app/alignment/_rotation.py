"""The rigid-body model of :func:`xcorr_app.align` (``model="rigid-body"``): every frame's
rotation about its centre and its shift, measured in three more passes over the stack.

The first (:func:`measure_rigid_body`, each range by
:func:`~xcorr_app.alignment.piecewise.rigid_body_part`) measures a 3x3 grid of the frames'
patches within :func:`rigid_body_deviation` px of their rigid shift (the translation passes'),
fits the rotation and the shift (:func:`~xcorr_app.alignment.piecewise.fit_rigid_body`), and
refines them through the fitted transform; the next two refine them over the whole frame
(:func:`_whole_frame`: the frames' mean through their transforms, then Gauss-Newton steps of
each frame against it: nine patches of a dim, smooth scene measure the angle loosely).  The
result's ``shifts`` are then the rigid-body shifts and its ``rotation_deg`` the angles
(:func:`rigid_body_result`), applied by one warp
(:func:`~xcorr_app.alignment.warp.rigid_body_field`).  Every run with the quality report also
measures each aligned frame's rotation and flags ``rotated`` the frames it leaves rotated
(:class:`~xcorr_app.alignment.piecewise.RotationProbe`).

Examples
--------
>>> rigid_body_deviation((95, 121)), rigid_body_deviation((512, 512))
(4, 14)
"""

from __future__ import annotations

import math

import numpy as np

from .. import backend
from ..streaming import DEFAULT_CHUNK

__all__ = ["RIGID_BODY_MAX_DEG", "measure_rigid_body", "rigid_body_result", "relative_to_frame",
           "rigid_body_deviation", "rigid_body_grid", "check_rigid_body"]

#: ``model="rigid-body"``: the largest rotation measured at once (degrees; the search of the
#: patches is sized for it, :func:`rigid_body_deviation`)
RIGID_BODY_MAX_DEG = 3.0
#: the grid of its patches
GRID = (3, 3)
#: whether the patches' fit is refined over the whole frame (:func:`_whole_frame`; its steps:
#: :data:`~xcorr_app.alignment.piecewise.WHOLE_FRAME_STEPS`)
WHOLE_FRAME = True


def rigid_body_deviation(frame_shape) -> int:
    """The search (px) of the rigid-body model's patches around the frame's rigid shift: what a
    rotation of :data:`RIGID_BODY_MAX_DEG` moves the 3x3 grid's corner patches (a third of the
    diagonal from the centre), and a pixel more; at least 2."""
    reach = math.hypot(*frame_shape) / 3.0 * math.sin(math.radians(RIGID_BODY_MAX_DEG))
    return max(2, int(math.ceil(reach)) + 1)


def rigid_body_grid(frame_shape, shifts):
    """The 3x3 :class:`~xcorr_app.alignment.piecewise.PatchGrid` of the rigid-body model over
    the area every frame covers after its rigid shift (less the search and the resampling's
    reach, as the patch pass's grid); InputError where the frames are too small for it."""
    from .piecewise import patch_grid

    return patch_grid(frame_shape, shifts, GRID, None, rigid_body_deviation(frame_shape))


def check_rigid_body(frame_shape):
    """InputError where frames of ``frame_shape`` are too small for the rigid-body model's
    patches (before a frame is read)."""
    from ..errors import InputError

    try:
        rigid_body_grid(frame_shape, [[0.0, 0.0]])
    except InputError as exc:
        raise InputError(f"model rigid-body measures 3x3 patches of every frame: frames of "
                         f"{frame_shape[0]}x{frame_shape[1]} px are too small for them ({exc})") \
            from None


def measure_rigid_body(opts, shifts, executor, frame_shape, template, low=None):
    """``(shifts, rotation_deg, fitted)`` ``(N, 2)``, ``(N,)``, ``(N,)`` of the rigid-body
    model: every frame read through ``executor`` (its ranges), measured against ``template``
    (the image the run's last pass measured against) from the rigid ``shifts`` of the
    translation passes, then over the whole frame against the frames' mean (two more reads:
    :func:`_whole_frame`, the frames flagged ``low`` (N,) left out of the mean).  A frame whose
    fit fails (too few patches with texture, no shift) keeps its shift and angle 0
    (``fitted`` False)."""
    import functools

    from .piecewise import rigid_body_part

    shifts = np.asarray(shifts, np.float64)
    grid = rigid_body_grid(frame_shape, shifts)
    chunk = opts.chunk_frames or executor.chunk or DEFAULT_CHUNK
    part = functools.partial(rigid_body_part, opts=opts, shifts=shifts, grid=grid,
                             chunk=chunk, template=executor.portable(template))
    got = np.concatenate([backend.to_numpy(p) for p in executor.map(part, None)])
    if WHOLE_FRAME and np.isfinite(got).all(axis=1).any():
        got = _whole_frame(opts, got, executor, grid, chunk, low)
    fitted = np.isfinite(got).all(axis=1)
    out = np.where(fitted[:, None], got[:, 1:3], shifts)
    return out, np.where(fitted, np.rad2deg(got[:, 0]), 0.0), fitted


def _whole_frame(opts, rows, executor, grid, chunk, low=None):
    """``rows`` ``(N, 3)`` of the patch fit refined over the whole frame: the frames' mean
    through their transforms (a pass; not of the frames flagged ``low``), then each frame's
    Gauss-Newton steps against it (a pass; :func:`~xcorr_app.alignment.piecewise.
    whole_frame_steps`).  Against the mean rather than the run's template: a single frame's
    noise would be every frame's error."""
    import functools

    from .piecewise import grid_box, next_image, rigid_body_mean_part, whole_frame_part

    kept = rows if low is None else np.where(np.asarray(low, bool)[:, None], np.nan, rows)
    if not np.isfinite(kept).all(axis=1).any():
        kept = rows
    parts = executor.map(functools.partial(rigid_body_mean_part, opts=opts, rows=kept,
                                           chunk=chunk), None)
    xp = executor.xp
    template = next_image(xp, executor.src.frame_shape, parts,
                          xp.zeros(executor.src.frame_shape, xp.float32))
    part = functools.partial(whole_frame_part, opts=opts, rows=rows, chunk=chunk,
                             template=executor.portable(template),
                             box=_fit_box(grid_box(grid), grid.max_deviation,
                                          executor.src.frame_shape))
    return np.concatenate([backend.to_numpy(p) for p in executor.map(part, None)])


def _fit_box(box, deviation, frame_shape):
    """``box`` (the patches' span, inside the area every frame covers less the search and the
    warp's reach) less what a rotation of :data:`RIGID_BODY_MAX_DEG` moves its corners beyond
    the patches' search ``deviation`` (elongated frames: their corners lie farther out than
    the patches' centres the search is sized for): every pixel fitted reads inside the
    frame."""
    y0, y1, x0, x1 = box
    c = ((frame_shape[0] - 1) / 2.0, (frame_shape[1] - 1) / 2.0)
    far = max(math.hypot(y - c[0], x - c[1]) for y in (y0, y1) for x in (x0, x1))
    inset = max(0, math.ceil(far * math.sin(math.radians(RIGID_BODY_MAX_DEG)) - deviation))
    if y1 - y0 <= 2 * inset + 2 or x1 - x0 <= 2 * inset + 2:
        return box
    return y0 + inset, y1 - inset, x0 + inset, x1 - inset


def relative_to_frame(shifts, rotation_deg, k=0):
    """``(shifts, rotation_deg)`` of rigid-body transforms made relative to frame ``k``'s (frame
    ``k``'s own is then none): each frame's transform followed by the inverse of frame ``k``'s,
    as the translation model's template passes report shifts relative to the reference frame's.
    Frame ``j`` turned ``phi_j`` after its shift ``t_j``
    (:mod:`~xcorr_app.alignment.warp._rigid_body`) is frame ``k``'s turned ``phi_j - phi_k``
    after ``t_j - R(phi_k - phi_j) t_k``.

    >>> s, a = relative_to_frame(np.array([[1.0, 2.0], [3.0, 2.0]]), np.array([90.0, 90.0]))
    >>> s.round(9).tolist(), a.tolist()
    ([[0.0, 0.0], [2.0, 0.0]], [0.0, 0.0])
    """
    from .warp import rotation_matrix

    turn = np.asarray(rotation_deg, np.float64) - rotation_deg[k]
    back = rotation_matrix(-np.deg2rad(turn))
    return np.asarray(shifts, np.float64) - np.einsum("nij,j->ni", back, shifts[k]), turn


def rigid_body_result(res, opts, executor, frame_shape, template):
    """``res`` (the translation passes' :class:`~._result.AlignResult`) made the rigid-body
    model's: its ``shifts`` and ``rotation_deg`` from :func:`measure_rigid_body`; with
    ``interpolate_low`` the low-confidence frames' shifts and angles interpolated from their
    neighbours; a note for frames whose fit failed.  With a reference frame (``first``,
    ``refined``: templates of the frames from frame 0; an index), relative to that frame's
    (:func:`relative_to_frame`); with the mean or an image as reference, in the place of the
    frames' mean (the whole-frame fit's template).  Returns the image the quality report
    measures against: ``template``, or frame 0 where the frames are aligned to it and not to a
    template of frames that turn."""
    from ..io import plural
    from ._result import interpolate_flagged

    shifts, angle, fitted = measure_rigid_body(opts, res.shifts, executor, frame_shape,
                                               template, res.low_confidence)
    measured = np.isfinite(res.shifts).all(axis=1)
    k = opts.reference_frame
    if k is not None:
        k %= len(shifts)
    # (the whole frame is fitted against the frames' mean, which turns as they do: back to
    # the reference frame's place, as a template of the frames needs too)
    if k is not None and measured[k] and fitted[k]:
        shifts, angle = relative_to_frame(shifts, angle, k)
        if opts.from_template:
            template = executor.xp.asarray(executor.src.read(0, 1)[0])  # (as they now are)
    if opts.interpolate_low:
        shifts = interpolate_flagged(shifts, res.low_confidence)
        both = np.where(measured[:, None], angle[:, None], np.nan)[:, [0, 0]]
        angle = np.nan_to_num(interpolate_flagged(both, res.low_confidence)[:, 0])
    # (a frame without a shift, a constant one's, has no angle either: not a fit's leftover)
    angle = np.where(np.isfinite(shifts).all(axis=1), angle, np.nan)
    res.shifts, res.rotation_deg = shifts, angle
    res.frame_shape = tuple(frame_shape)  # (the centre it rotates about, for the aligned stack)
    res.settings["model"] = opts.model
    failed = int((measured & ~fitted).sum())
    if failed:
        res.notes.append(f"model rigid-body: {plural(failed, 'frame')} without a rotation fit "
                         "(too few patches with texture): the translation model's shift kept, "
                         "angle 0")
    return template


