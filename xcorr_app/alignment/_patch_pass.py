"""The patch pass of piecewise-rigid registration (:func:`measure_field`): after the rigid
pass of :func:`xcorr_app.align`, every frame is streamed again, its patches measured within
``max_deviation`` of its rigid shift and refined through the smooth field (the rules:
:mod:`xcorr_app.alignment._patches`; the field and the warp:
:mod:`xcorr_app.alignment._motion_field`).
"""

from __future__ import annotations

import contextlib
import numbers

import numpy as np

from .. import backend
from ..errors import InputError
from ..io import open_source
from ..streaming import map_chunks
from ._field_resample import field_weights
from ._motion_field import MotionField, warped_sum
from ._options import prefilter_for
from ._patches import (REFINE_PASSES, PatchGrid, common_area, fill_low, integer_parts,
                       low_patches, patch_left, patch_margin, patch_shifts, refine_left,
                       refine_shifts, refine_taper, tapered, template_patches)
from ._pipeline import prepared_reference
from ._preprocess import prepare
from ._references import reference_frame
from ._template import TemplateAccumulator
from ._warp import shift_frames

#: ``patch_template_passes``: the most templates refined from the corrected frames (as
#: ``reference="refined:ITER"``); the default :data:`DEFAULT_TEMPLATE_PASSES`
MAX_TEMPLATE_PASSES = 2
DEFAULT_TEMPLATE_PASSES = 0


def _template(opts, src, xp, chunk, rigid, grid):
    """The prepared template's patches the frames' patches are measured against, the
    template as prepared (host, for the picture) and as read: the rigid reference, or for
    ``reference="refined"`` the mean of the rigidly aligned frames (shifts relative to it)."""
    if opts.refined:
        h, w = src.frame_shape

        def aligned_sum(start, frames):  # the sum of the chunk's aligned frames, and a count
            s = rigid[start:start + len(frames)]
            ok = ~np.isnan(s).any(axis=1)
            f = shift_frames(frames[xp.asarray(ok)].astype(xp.float32), xp.asarray(s[ok]))
            return xp.concatenate([f.sum(axis=0, dtype=xp.float64).ravel(),
                                   xp.full(1, float(ok.sum()))])

        total = sum(part for _, part in map_chunks(lambda: contextlib.nullcontext(src), chunk,
                                                   aligned_sum, xp=xp))
        image = (total[:-1] / max(total[-1], 1.0)).reshape(h, w).astype(np.float32)
    else:
        image = reference_frame(opts.reference, src, xp, chunk, opts.channel)
    frame, raw = prepared_reference(opts, src, xp, chunk, image=image)
    return template_patches(frame, grid), backend.to_numpy(raw), image


def measure_field(opts, stack_or_path, rigid, xp, chunk, patches, patch_overlap,
                  max_deviation, template_passes=0):
    """The patch pass of :func:`xcorr_app.align` (the rules: :mod:`._patches`): a
    :class:`MotionField` from the rigid shifts ``rigid`` ``(N, 2)`` of the run of ``opts``.

    ``template_passes`` (0, 1 or 2): after a patch pass, the frames (those with a rigid
    shift) warped by their fields are averaged into a new template, accumulated chunk by chunk
    while that pass streams (:func:`~._motion_field.warped_sum` into a
    :class:`~._template.TemplateAccumulator`: pixels no frame covers keep the previous
    template's), and the patches are measured again against it: the stack is read once per
    patch pass, never once more for the template."""
    if opts.previous:
        raise InputError("patches are measured against one reference: reference 'previous' "
                         "is not available with patches")
    passes = check_template_passes(template_passes)
    prefilter = prefilter_for(opts.prefilter, "zncc", opts.features)  # no window on patches
    rigid = np.asarray(rigid, np.float64)
    with open_source(stack_or_path, opts.channel) as src:
        grid = PatchGrid.make(patches, patch_overlap, max_deviation, src.frame_shape,
                              common_area(rigid, src.frame_shape, patch_margin(max_deviation)))
        tpatches, template, image = _template(opts, src, xp, chunk, rigid, grid)
        dev = "cpu" if xp is np else "gpu"
        weights = field_weights(grid.centres, src.frame_shape, xp)
        taper = refine_taper(grid.size)
        for k in range(passes + 1):
            acc = TemplateAccumulator(xp, src.frame_shape) if k < passes else None
            work = _measurer(opts, xp, dev, prefilter, grid, rigid, tpatches, taper, weights, acc)
            if xp is not np:  # the chunks' streams read what was set up on this one
                xp.cuda.Device().synchronize()
            parts = [block for _, block in map_chunks(
                lambda: contextlib.nullcontext(src), chunk, work, xp=xp)]
            if acc is None:
                break
            image = acc.template(image)  # the warped frames' mean (on the run's device)
            frame, raw = prepared_reference(opts, src, xp, chunk, image=image)
            tpatches, template = template_patches(frame, grid), backend.to_numpy(raw)
    table = np.concatenate(parts) if parts else np.zeros((0, grid.n_patches, 5))
    d, cf, low = table[..., :2], table[..., 3], table[..., 4] == 1
    gy, gx = grid.grid
    n = len(table)
    field = rigid[:, None, :] + d
    return MotionField(field.reshape(n, gy, gx, 2), grid.centres, cf.reshape(n, gy, gx),
                       low.reshape(n, gy, gx), grid, template)


def _measurer(opts, xp, dev, prefilter, grid, rigid, tpatches, taper, weights, acc):
    """The work of one patch pass on a chunk: ``(N, P, 5)`` deviation, peak, confidence, low
    (host); with ``acc`` the chunk's frames warped by their fields are added to it (in the
    chunk's stream order).

    The correlations run on the run's device; the small per-patch rules (which patches are
    low, :func:`~._patches.fill_low`, the result's columns) on the host with NumPy, on GPU
    runs too: the CPU's numbers, and no CuPy reductions to compile on a fresh machine (there
    ``low.any()`` alone was two CUB compilations, 5.4 s of a 17.5 s first run, H100
    2026-11-23).  The chunk's result is copied to the host right after anyway; the low
    patches' deviations go to the host once more per refinement pass, in chunks that have
    any."""
    left = patch_left(tpatches, grid.max_deviation)  # (GPU: the patches' summed-area tables)
    # the refinement's template patches (weighted), made on the host: NumPy's numbers on
    # both devices (a CUB mean, 2.8 s of NVRTC on a fresh machine, otherwise)
    tnear = xp.asarray(tapered(backend.to_numpy(tpatches), taper))
    near = refine_left(tnear, taper)
    # the rigid shifts on the device once (a copy from host memory per chunk may wait for the
    # queued work)
    on_device = (xp.asarray(rigid), *(xp.asarray(a) for a in integer_parts(rigid)))

    def measure(start, frames):
        stop = start + len(frames)
        s = rigid[start:stop]
        s_on, whole, off = (a[start:stop] for a in on_device)
        p = prepare(frames, xp, prefilter, None)
        d, pk, cf, border = patch_shifts(tpatches, p.frames, s, grid, opts.subpixel, dev, left,
                                         uploaded=None if xp is np else (whole, off))
        pk, cf, border = (backend.to_numpy(a) for a in (pk, cf, border))
        low = low_patches(backend.to_numpy(d), pk, cf, border, opts.min_confidence)
        some_low = bool(low.any())
        if some_low:
            d = xp.asarray(fill_low(backend.to_numpy(d), low, grid.grid))
        for _ in range(REFINE_PASSES):  # through the field: what remains, measured
            field = (s_on[:, None, :] + d).reshape(len(s), *grid.grid, 2)
            d = d + refine_shifts(tnear, p.frames, grid, field, weights, opts.subpixel, dev,
                                  near, taper)
            if some_low:
                d = xp.asarray(fill_low(backend.to_numpy(d), low, grid.grid))
        if acc is not None:
            keep = np.flatnonzero(~np.isnan(s).any(axis=1))  # host: the measured frames
            if len(keep):
                field = (s_on[:, None, :] + d).reshape(len(s), *grid.grid, 2)
                idx = xp.asarray(keep)
                total, count = warped_sum(frames[idx], field[idx], weights)
                acc.total += total
                acc.coverage += count
        cf = np.where(border, 0.0, cf)  # no distinct peak inside the window
        return np.concatenate([backend.to_numpy(d), pk[..., None].astype(np.float64),
                               cf[..., None].astype(np.float64),
                               low[..., None].astype(np.float64)], axis=-1)

    return measure


def check_template_passes(template_passes) -> int:
    """``patch_template_passes`` as an int in 0..:data:`MAX_TEMPLATE_PASSES`, else InputError."""
    v = template_passes
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) \
            or not 0 <= int(v) <= MAX_TEMPLATE_PASSES:
        raise InputError(f"patch_template_passes must be an integer from 0 to "
                         f"{MAX_TEMPLATE_PASSES}, got {template_passes!r}")
    return int(v)
