"""The motion field of piecewise-rigid registration (measured by
:func:`xcorr_app.alignment.piecewise._patch_pass.measure_field`): the field upsampled to every pixel
(:func:`dense_field`) and the frames warped by it (:func:`warp_frames`, :func:`apply_field`).

The field at every pixel is a separable natural cubic spline through the patch centres
(weights from :class:`scipy.interpolate.CubicSpline` on the host, once per run; linear
extrapolation beyond the outermost centres, so a tilt of the field continues to the frame's
edge): ``Wy @ S @ Wx.T`` per frame (:mod:`._field_resample`, the one home of the field and its
resampling).  The warp resamples each frame once: ``out[y, x] = frame[y - sy(y, x), x - sx(y,
x)]``, bilinear by default (``map_coordinates(order=1)``), cubic convolution with
``resample="cubic"``; pixels whose source lies outside the frame get ``fill``.  On the GPU one
kernel per chunk warps every frame and evaluates the field at each pixel from the patch shifts
(no dense field in memory); on the CPU the NumPy reference of :mod:`._field_resample`.

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

from ... import backend
from ...errors import InputError
from ...io import open_source
from ...streaming import map_chunks
from ._field_resample import FIELD_RESAMPLE, bilinear_sample, cubic_sample, warp_gpu
from ._spline import dense_field, field_weights, spline_weights
from ..warp import check_out
from ..warp import check_fill
from ._patches import PatchGrid

__all__ = ["MotionField", "apply_field", "dense_field", "field_area", "field_weights",
           "spline_weights", "warp_chunk", "warp_frames", "warped_sum"]

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


def warp_frames(frames, dense, resample="bilinear", fill=0.0):
    """``out[n, y, x] = frames[n, y - dy, x - dx]`` with ``(dy, dx) = dense[n, :, y, x]``:
    ``(N, H, W)`` float32 NumPy, the reference of the GPU warp (CuPy inputs are copied to the
    host).  ``resample="cubic"``: cubic convolution, except for frames with NaN or Inf pixels
    (bilinear, so those pixels do not spread); sources outside the frame give ``fill``."""
    check_resample(resample)
    fill = check_fill(fill)
    frames = backend.to_numpy(frames).astype(np.float32, copy=False)
    dense = backend.to_numpy(dense)
    h, w = frames.shape[1:]
    yy, xx = np.mgrid[:h, :w].astype(np.float64)
    out = np.empty(frames.shape, np.float32)
    for k in range(len(frames)):  # a frame at a time (the memory of the coordinates)
        cy, cx = yy - dense[k, 0], xx - dense[k, 1]
        if resample == "cubic" and np.isfinite(frames[k]).all():
            inside = (cy >= 0) & (cy <= h - 1) & (cx >= 0) & (cx <= w - 1)
            out[k] = np.where(inside, cubic_sample(frames[k], cy, cx), fill)
        else:
            out[k] = bilinear_sample(frames[k], cy, cx, fill)
    return out


def warp_chunk(frames, patch_field, weights, resample="bilinear", fill=0.0, box=None,
               out=None):
    """The frames ``(N, H, W)`` warped by their fields (``patch_field`` ``(N, gy, gx, 2)``,
    spline ``weights`` of :func:`field_weights`), the pixels of ``box`` ``(y0, y1, x0, x1)``
    (default the frame): float32 on the frames' device (one kernel on the GPU, the field
    evaluated at each pixel; :func:`warp_frames` on the CPU).  The one warp of
    :func:`apply_field` and of ``align(out=)``'s patch pass.  ``out`` (GPU only): a
    C-contiguous float32 CuPy array to warp into (no copy after)."""
    xp = backend.array_module_of(frames)
    h, w = frames.shape[1:]
    y0, y1, x0, x1 = box or (0, h, 0, w)
    fill = check_fill(fill)
    if xp is not np:
        return warp_gpu(frames, xp.asarray(patch_field), weights, resample == "cubic", fill,
                        (y0, y1, x0, x1), out=out)
    dense = dense_field(backend.to_numpy(patch_field), None, None, weights)
    return warp_frames(frames, dense, resample, fill)[:, y0:y1, x0:x1]


#: frames warped at once by :func:`warped_sum` on the GPU
WARP_SUM_BATCH = 8


def warped_sum(frames, patch_field, weights):
    """``(sum, count)`` ``(H, W)`` float64 on the frames' device: the frames ``(N, H, W)``
    warped bilinearly by their fields (``patch_field`` ``(N, gy, gx, 2)``, spline ``weights``
    of :func:`field_weights`) and summed, and how many covered each pixel (a pixel whose
    source lies outside its frame, or is NaN or Inf, counts 0).  The GPU warps a chunk in one
    launch (:func:`~._field_resample.warp_gpu`); the CPU a frame at a time."""
    xp = backend.array_module_of(frames)
    if xp is not np:  # a few frames a launch: the temporaries are ~11 bytes a pixel a frame
        h, w = frames.shape[1:]
        total, count = xp.zeros((h, w)), xp.zeros((h, w))
        for a in range(0, len(frames), WARP_SUM_BATCH):
            out = warp_gpu(frames[a:a + WARP_SUM_BATCH], patch_field[a:a + WARP_SUM_BATCH],
                           weights, False, float("nan"))
            ok = xp.isfinite(out)
            total += xp.where(ok, out, 0.0).sum(axis=0, dtype=xp.float64)
            count += ok.sum(axis=0, dtype=xp.float64)
        return total, count
    h, w = frames.shape[1:]
    total, count = np.zeros((h, w)), np.zeros((h, w))
    for n in range(len(frames)):
        dense = dense_field(np.asarray(patch_field[n:n + 1]), None, None, weights)
        out = warp_frames(frames[n:n + 1], dense, "bilinear", np.nan)[0]
        ok = np.isfinite(out)
        total += np.where(ok, out, 0.0)
        count += ok
    return total, count


def check_resample(resample):
    if resample not in FIELD_RESAMPLE:
        raise InputError(f"unknown resampling {resample!r} for a motion field; use "
                         f"{' or '.join(FIELD_RESAMPLE)}")


def field_area(patch_field, frame_shape):
    """``(y0, y1, x0, x1)``: the area every frame covers when shifted by any of its patch
    shifts (:func:`~xcorr_app.alignment._apply.common_area` of all of them: the field between
    the patch centres stays within their range, the extrapolation beyond them may not)."""
    from ..warp import common_area as shifted_area

    return shifted_area(np.asarray(patch_field, np.float64).reshape(-1, 2), frame_shape)


def apply_field(stack_or_path, patch_field, centres, *, channel=None, fill=0.0,
                resample="bilinear", crop=None, chunk_frames=64, device="auto", out=None):
    """Yield ``(start, warped_chunk)`` (float32 NumPy) for every chunk of the stack, each
    frame warped by its motion field (``patch_field`` ``(N, gy, gx, 2)`` at ``centres``);
    ``crop``: True keeps the area every warped frame covers (:func:`field_area`), or a box
    ``(y0, y1, x0, x1)``; ``out``: as for :func:`~xcorr_app.alignment._apply.apply_shifts`
    (the chunks written into it)."""
    fill = check_fill(fill)  # (before the input is opened)
    with open_source(stack_or_path, channel) as src:
        patch_field = np.asarray(patch_field, np.float64)
        if patch_field.shape[0] != src.n_frames:
            raise InputError(f"a motion field of {patch_field.shape[0]} frames does not match "
                             f"{src.n_frames} frames")
        if crop is True:
            crop = field_area(patch_field, src.frame_shape)
        check_resample(resample)
        h, w = src.frame_shape
        y0, y1, x0, x1 = crop or (0, h, 0, w)
        if not all(isinstance(v, (int, np.integer)) for v in (y0, y1, x0, x1)) \
                or not (0 <= y0 < y1 <= h and 0 <= x0 < x1 <= w):
            raise InputError(f"crop box {crop} is not inside the {h}x{w} frame")  # either device
        check_out(out, (src.n_frames, y1 - y0, x1 - x0))
        xp = backend.xp_for(backend.resolve_device(device))
        weights = field_weights(centres, src.frame_shape, xp)

        def warped(start, frames):
            return warp_chunk(frames, patch_field[start:start + len(frames)], weights,
                              resample, fill, (y0, y1, x0, x1))

        yield from map_chunks(lambda: contextlib.nullcontext(src), chunk_frames, warped, xp=xp,
                              out=out)
