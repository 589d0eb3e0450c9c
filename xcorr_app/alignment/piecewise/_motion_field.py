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
from ..rigid import check_float32_range
from ..warp import check_fill, check_out
from ._patches import PatchGrid

__all__ = ["MotionField", "apply_field", "check_field", "dense_field", "field_area",
           "field_weights", "spline_weights", "warp_chunk", "warp_frames", "warped_sum"]

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


def check_field(patch_field, centres, n_frames, frame_shape):
    """``(patch_field, centres)`` as float64 ``(N, gy, gx, 2)`` and ``(gy, gx, 2)``, or
    InputError where they do not fit each other or the ``n_frames`` frames of
    ``frame_shape``: another shape; centres that are not a grid (y the same along each row, x
    along each column, both increasing) inside the frame; an infinite patch shift or one that
    moves the frame wholly out of it; a frame NaN at some patches but not all.  A frame NaN at
    every patch (no field measured) is kept: it is left unshifted."""
    try:
        f = np.asarray(patch_field, np.float64)
        c = np.asarray(centres, np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"a motion field and its patch centres must be numbers: {exc}") from None
    if f.ndim != 4 or f.shape[-1] != 2 or f.shape[0] != n_frames or 0 in f.shape:
        raise InputError(f"a motion field of shape {f.shape} does not match {n_frames} frames "
                         "(it is (frames, gy, gx, 2), gy, gx at least 1)")
    gy, gx = f.shape[1:3]
    if c.shape != (gy, gx, 2):
        raise InputError(f"patch centres of shape {c.shape} do not match the motion field's "
                         f"{gy}x{gx} patches (they are ({gy}, {gx}, 2))")
    cy, cx = c[:, 0, 0], c[0, :, 1]
    if not (np.isfinite(c).all() and (c[..., 0] == cy[:, None]).all()
            and (c[..., 1] == cx[None, :]).all() and (np.diff(cy) > 0).all()
            and (np.diff(cx) > 0).all()):
        raise InputError("the patch centres are not a grid (y the same along each row, x along "
                         "each column, both increasing)")
    h, w = frame_shape
    if cy[0] < 0 or cy[-1] > h - 1 or cx[0] < 0 or cx[-1] > w - 1:
        raise InputError(f"the patch centres (y {cy[0]:g} to {cy[-1]:g}, x {cx[0]:g} to "
                         f"{cx[-1]:g}) lie beyond the {h}x{w} frame: the field was measured "
                         "on frames of another size")
    nan = np.isnan(f).reshape(len(f), -1)
    with np.errstate(invalid="ignore"):  # (NaN compares False)
        out = (np.isinf(f).any(axis=-1) | (np.abs(f[..., 0]) >= h)
               | (np.abs(f[..., 1]) >= w)).reshape(len(f), -1).any(axis=1)
    for bad, what in ((nan.any(axis=1) & ~nan.all(axis=1), "is NaN at some of its patches "
                       "but not all (a frame's field is measured at every patch or none)"),
                      (out, f"moves patches wholly out of the {h}x{w} frame (infinite, or as "
                       "large as the frame)")):
        if bad.any():
            k, more = int(np.flatnonzero(bad)[0]), int(bad.sum()) - 1
            raise InputError(f"the motion field of frame {k}"
                             f"{f' (and of {more} other frames)' if more else ''} {what}")
    return f, c


def field_area(patch_field, frame_shape):
    """``(y0, y1, x0, x1)``: the area every frame covers when shifted by any of its patch
    shifts (:func:`~xcorr_app.alignment._apply.common_area` of all of them: the field between
    the patch centres stays within their range, the extrapolation beyond them may not)."""
    from ..warp import common_area as shifted_area

    return shifted_area(np.asarray(patch_field, np.float64).reshape(-1, 2), frame_shape)


def apply_field(stack_or_path, patch_field, centres, *, channel=None, fill=0.0,
                resample="bilinear", crop=None, chunk_frames=64, device="auto", out=None):
    """Yield ``(start, warped_chunk)`` (float32 NumPy) for every chunk of the stack, each
    frame warped by its motion field (``patch_field`` ``(N, gy, gx, 2)`` at ``centres``,
    checked by :func:`check_field`: a frame NaN at every patch is left unshifted);
    ``crop``: True keeps the area every warped frame covers (:func:`field_area`), or a box
    ``(y0, y1, x0, x1)``; ``out``: as for :func:`~xcorr_app.alignment._apply.apply_shifts`
    (the chunks written into it)."""
    fill = check_fill(fill)  # (before the input is opened)
    with open_source(stack_or_path, channel) as src:
        patch_field, centres = check_field(patch_field, centres, src.n_frames, src.frame_shape)
        if src.dtype == np.float64:  # (shifted in float32)
            check_float32_range(src.read(0, 1)[0], "the stack", "its frames are shifted",
                                "scale the stack into that range first")
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
