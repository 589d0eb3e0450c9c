"""The motion field of piecewise-rigid registration (measured by
:func:`xcorr_app.alignment._patch_pass.measure_field`): the field upsampled to every pixel
(:func:`dense_field`) and the frames warped by it (:func:`warp_frames`, :func:`apply_field`).

The field at every pixel is a separable natural cubic spline through the patch centres
(weights from :class:`scipy.interpolate.CubicSpline` on the host, once per run; linear
extrapolation beyond the outermost centres, so a tilt of the field continues to the frame's
edge); applied as two small matrix products per frame, ``Wy @ S @ Wx.T``, on the device of
the frames (NumPy or CuPy from the same code, float64).  The warp resamples each frame once:
``out[y, x] = frame[y - sy(y, x), x - sx(y, x)]`` by ``map_coordinates`` of
``scipy.ndimage`` / ``cupyx.scipy.ndimage`` (order 1, bilinear, by default; order 3, cubic
B-spline, with ``resample="cubic"``), pixels from outside the frame get ``fill``.

Examples
--------
>>> w = spline_weights(np.array([10.0, 30.0]), 41)
>>> w.shape, w[20].tolist()
((41, 2), [0.5, 0.5])
"""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

from .. import backend
from ..errors import InputError
from ..io import open_source
from ..streaming import map_chunks
from ._patches import PatchGrid, ndimage_of

#: the resampling of the warp: ``map_coordinates`` order
FIELD_RESAMPLE = {"bilinear": 1, "cubic": 3}


@dataclasses.dataclass
class MotionField:
    """What the patch pass measured (the :class:`~xcorr_app.alignment.AlignResult` fields
    ``motion_field``, ``patch_centres``, ``patch_confidence``, ``patch_low``)."""

    field: np.ndarray        # (N, gy, gx, 2) patch shifts (rigid + deviation), align's sign
    centres: np.ndarray      # (gy, gx, 2) patch centres (y, x) in pixels
    confidence: np.ndarray   # (N, gy, gx) peak over second peak
    low: np.ndarray          # (N, gy, gx) replaced by the neighbours' median
    grid: PatchGrid
    template: np.ndarray = None  # (H, W) the reference the patches were measured against

    def deviation(self, rigid):
        """``(N, gy, gx, 2)``: the field minus the frames' rigid shifts."""
        return self.field - np.asarray(rigid, np.float64)[:, None, None, :]


def spline_weights(centres, n):
    """``(n, len(centres))`` float64: the weights that map values at ``centres`` to pixels
    ``0..n-1`` by a natural cubic spline, linear beyond the outermost centres."""
    from scipy.interpolate import CubicSpline

    c = np.asarray(centres, np.float64)
    g = len(c)
    x = np.arange(n, dtype=np.float64)
    if g == 1:
        return np.ones((n, 1))
    spline = CubicSpline(c, np.eye(g), bc_type="natural", axis=0)
    w = spline(np.clip(x, c[0], c[-1]))
    d = spline(c[[0, -1]], 1)  # slopes at the ends
    w += np.where(x < c[0], x - c[0], 0.0)[:, None] * d[0] + \
        np.where(x > c[-1], x - c[-1], 0.0)[:, None] * d[1]
    return w


def dense_field(patch_field, centres, frame_shape, weights=None):
    """``(N, 2, H, W)`` float64: the shifts of ``patch_field`` ``(N, gy, gx, 2)`` at every
    pixel, on its device (NaN rows give 0: left unshifted)."""
    xp = backend.array_module_of(patch_field)
    if weights is None:
        weights = field_weights(centres, frame_shape, xp)
    wy, wx = weights
    s = xp.nan_to_num(patch_field.astype(xp.float64), nan=0.0).transpose(0, 3, 1, 2)
    return wy @ s @ wx.T  # (N, 2, gy, gx) -> (N, 2, H, W)


def field_weights(centres, frame_shape, xp):
    """The spline weights of both axes, on ``xp``'s device."""
    c = np.asarray(centres, np.float64)
    return (xp.asarray(spline_weights(c[:, 0, 0], frame_shape[0])),
            xp.asarray(spline_weights(c[0, :, 1], frame_shape[1])))


def warp_frames(frames, dense, resample="bilinear", fill=0.0):
    """``out[n, y, x] = frames[n, y - dy, x - dx]`` with ``(dy, dx) = dense[n, :, y, x]``:
    ``(N, H, W)`` float32 on the frames' device (``resample="cubic"``: frames with NaN or Inf
    pixels are resampled bilinearly, so those pixels do not spread)."""
    if resample not in FIELD_RESAMPLE:
        raise InputError(f"unknown resampling {resample!r} for a motion field; use "
                         f"{' or '.join(FIELD_RESAMPLE)}")
    xp = backend.array_module_of(frames)
    nd = ndimage_of(xp)
    frames = frames.astype(xp.float32, copy=False)
    h, w = frames.shape[1:]
    grid = xp.stack(xp.meshgrid(xp.arange(h, dtype=xp.float64), xp.arange(w, dtype=xp.float64),
                                indexing="ij"))
    out = xp.empty(frames.shape, xp.float32)
    order = FIELD_RESAMPLE[resample]
    # the cubic B-spline's prefilter would spread a NaN pixel over the whole frame: such
    # frames are resampled bilinearly (the NaN stays where it was, as in the rigid warp)
    finite = backend.to_numpy(xp.isfinite(frames).all(axis=(1, 2))) if order > 1 else None
    for k in range(len(frames)):  # a frame at a time: the spline must not mix frames
        out[k] = nd.map_coordinates(frames[k], grid - dense[k],
                                    order=order if finite is None or finite[k] else 1,
                                    mode="constant", cval=float(fill))
    return out


def field_area(patch_field, frame_shape):
    """``(y0, y1, x0, x1)``: the area every frame covers when shifted by any of its patch
    shifts (:func:`~xcorr_app.alignment._apply.common_area` of all of them: the field between
    the patch centres stays within their range, the extrapolation beyond them may not)."""
    from ._apply import common_area as shifted_area

    return shifted_area(np.asarray(patch_field, np.float64).reshape(-1, 2), frame_shape)


def apply_field(stack_or_path, patch_field, centres, *, channel=None, fill=0.0,
                resample="bilinear", crop=None, chunk_frames=64, device="auto"):
    """Yield ``(start, warped_chunk)`` (float32 NumPy) for every chunk of the stack, each
    frame warped by its motion field (``patch_field`` ``(N, gy, gx, 2)`` at ``centres``);
    ``crop``: True keeps the area every warped frame covers (:func:`field_area`), or a box
    ``(y0, y1, x0, x1)``."""
    with open_source(stack_or_path, channel) as src:
        patch_field = np.asarray(patch_field, np.float64)
        if patch_field.shape[0] != src.n_frames:
            raise InputError(f"a motion field of {patch_field.shape[0]} frames does not match "
                             f"{src.n_frames} frames")
        if crop is True:
            crop = field_area(patch_field, src.frame_shape)
        y0, y1, x0, x1 = crop or (0, None, 0, None)
        xp = backend.xp_for(backend.resolve_device(device))
        weights = field_weights(centres, src.frame_shape, xp)

        def warped(start, frames):
            pf = xp.asarray(patch_field[start:start + len(frames)])
            dense = dense_field(pf, centres, src.frame_shape, weights)
            return warp_frames(frames, dense, resample, fill)[:, y0:y1, x0:x1]

        yield from map_chunks(lambda: contextlib.nullcontext(src), chunk_frames, warped, xp=xp)
