"""The rigid-body model of :func:`xcorr_app.align` (``model="rigid-body"``): each frame rotated
about its centre and shifted, as one warp.

The aligned frame of a rotation ``phi`` (radians; ``rotation_deg`` in degrees) and a shift
``t = (dy, dx)``::

    out[q] = frame[c + R(-phi) (q - c) - t]        c = ((H - 1) / 2, (W - 1) / 2)

``R`` the rotation of :func:`rotation_matrix` (counter-clockwise as an image is shown, row 0 at
the top).  The frame is shifted by ``t``, then rotated by ``phi`` about the frame's centre: the
displacement at the centre is ``t``, the shift of the translation model (which measures about
the mean displacement over the frame, that of its centre), and ``phi = 0`` is that model.  The
displacement ``s(q) = q - c - R(-phi) (q - c) + t`` is affine in ``q``, so
the natural spline of the piecewise warp through it at the frame's four corners is exactly
it: :func:`rigid_body_field` gives that 2x2 motion field, which the motion field's warp
(:func:`~xcorr_app.alignment.piecewise.apply_field`, one resampling, bilinear or cubic, on
either device) applies.

Examples
--------
>>> field, centres = rigid_body_field([[1.0, 2.0]], [0.0], (5, 7))
>>> field[0, :, :, 0].tolist(), centres[1, 1].tolist()
([[1.0, 1.0], [1.0, 1.0]], [4.0, 6.0])
>>> round(float(corner_displacement(1.0, (101, 101))), 3)  # 1 degree: a 70.7 px corner moves
1.234
"""

from __future__ import annotations

import numpy as np

from ...errors import InputError

__all__ = ["rotation_matrix", "rigid_body_field", "corner_displacement", "check_rotation"]

#: displacements smaller than this (px) are none
SNAP_PX = 1e-6


def rotation_matrix(phi) -> np.ndarray:
    """``(..., 2, 2)``: the rotation by ``phi`` radians acting on ``(y, x)`` vectors,
    counter-clockwise as an image is shown (y down)."""
    c, s = np.cos(phi), np.sin(phi)
    return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)


def rigid_body_field(shifts, rotation_deg, frame_shape) -> tuple:
    """``(field, centres)``: the motion field ``(N, 2, 2, 2)`` of each frame's rigid-body
    transform (``shifts`` ``(N, 2)``, ``rotation_deg`` ``(N,)``) at the frame's four corners,
    and those corners ``(2, 2, 2)``: what
    :func:`~xcorr_app.alignment.piecewise.apply_field` warps by.  A frame without a shift
    (NaN) is NaN at every corner (left unshifted); a NaN angle counts as 0."""
    h, w = frame_shape
    t = np.asarray(shifts, np.float64).reshape(-1, 2)
    phi = np.deg2rad(np.nan_to_num(np.asarray(rotation_deg, np.float64).reshape(-1)))
    corners = np.stack(np.meshgrid([0.0, h - 1.0], [0.0, w - 1.0], indexing="ij"), -1)
    c = np.array([(h - 1) / 2.0, (w - 1) / 2.0])
    u = corners.reshape(-1, 2) - c  # (4, 2)
    back = rotation_matrix(-phi)  # (N, 2, 2)
    source = c + np.einsum("nij,pj->npi", back, u) - t[:, None, :]
    field = (corners.reshape(1, -1, 2) - source).reshape(len(t), 2, 2, 2)
    # (a fit's rounding, 1e-16 px, is no move: the warp would fill the edge row it reads past)
    field[np.abs(field) < SNAP_PX] = 0.0
    return field, corners


def corner_displacement(rotation_deg, frame_shape):
    """How far (px) a rotation by ``rotation_deg`` about the frame's centre moves its corners:
    ``2 r sin(|phi| / 2)``, ``r`` the centre's distance to a corner."""
    r = np.hypot((frame_shape[0] - 1) / 2.0, (frame_shape[1] - 1) / 2.0)
    return 2.0 * r * np.sin(np.abs(np.deg2rad(rotation_deg)) / 2.0)


def check_rotation(rotation_deg, n_frames):
    """``rotation_deg`` as ``(n_frames,)`` float64 degrees: InputError for another shape, a
    value that is not a number, or an infinite one (NaN: no rotation measured, counts as 0)."""
    try:
        a = np.asarray(rotation_deg, np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"rotation_deg must be numbers (degrees) per frame: {exc}") from None
    if a.shape != (n_frames,):
        raise InputError(f"rotation_deg of shape {a.shape} does not match {n_frames} frames")
    if np.isinf(a).any():
        raise InputError(f"the rotation of frame {int(np.flatnonzero(np.isinf(a))[0])} is "
                         "infinite")
    return a
