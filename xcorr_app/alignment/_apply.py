"""Applying shifts to a stack: :func:`apply_shifts`, chunk by chunk, and the crop of
:func:`common_area`.

Examples
--------
>>> import numpy as np
>>> common_area([[0.0, 0.0], [1.0, -2.0]], (10, 12))
(1, 10, 0, 10)
>>> stack = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
>>> [(a, c.shape) for a, c in apply_shifts(stack, [[0, 0], [0, 1]], device="cpu")]
[(0, (2, 3, 4))]
"""

from __future__ import annotations

import contextlib

import numpy as np

from .. import backend
from ..errors import InputError
from ..io import open_source, parse_axes, with_axes
from ..streaming import map_chunks
from .rigid import check_float32_range
from .warp import check_out, check_shifts, common_area
from ._options import as_stack

def apply_shifts(stack_or_path, shifts, *, channel=None, fill=0.0, resample="bilinear",
                 crop=False, chunk_frames=64, device="auto", gpus=None, out=None, axes=None,
                 bidi=0.0):
    """Yield ``(start, aligned_chunk)`` (float32 NumPy) for every chunk of the stack.

    Parameters
    ----------
    stack_or_path : ndarray, sequence of (H, W) ndarrays, str or Path
        As for :func:`~xcorr_app.align` (the same pixel types; a sequence is stacked).
    shifts : (N, 2) array
        ``(dy, dx)`` per frame (NaN: left unshifted; a frame moved wholly out of its frame is
        all ``fill``, as a drift chained by reference "previous" may move it); an infinite
        shift raises InputError (:func:`~.warp.check_shifts`).
    channel : int, optional
        The channel of a multi-channel file or array that is shifted, as for
        :func:`~xcorr_app.align`.
    fill : float
        Value of pixels shifted in from outside the frame (a number float32 holds, NaN or an
        infinity).
    resample : {"bilinear", "fourier"}
        Bilinear interpolation, or a Fourier phase ramp (exact for band-limited frames).
    crop : bool
        Keep only the area every shifted frame covers (:func:`common_area`).
    chunk_frames : int, optional
        Frames shifted at a time (default 64).
    device : {"auto", "gpu", "cpu"}
        Where the frames are shifted (``auto``: a usable GPU, else the CPU).
    gpus : sequence of int or str, optional
        Share the chunks out over these GPUs (:func:`xcorr_app.streaming.map_chunks`).
    out : ndarray, optional
        A C-contiguous float32 NumPy array of the aligned stack's shape (``(N, H, W)``, or
        the crop's): every chunk is written into it (from the GPU straight into it) and the
        chunks yielded are its views; iterate to the end to fill it.
    axes : str, optional
        The file's axes, as for :func:`~xcorr_app.align` (a path only).
    bidi : float
        The line offset of a bidirectional scan (pixels) removed from every frame before it is
        shifted (:func:`~xcorr_app.alignment.correct_bidi`; ``AlignResult.settings["bidi"]``
        of a run with ``bidi``); 0: none.

    Examples
    --------
    >>> stack = np.zeros((2, 6, 7), np.float32)
    >>> stack[:, 2, 3] = 1.0
    >>> [(start, chunk.shape) for start, chunk in apply_shifts(stack, [[0, 0], [1, -2]],
    ...                                                          device="cpu")]
    [(0, (2, 6, 7))]
    >>> aligned = np.concatenate([c for _, c in apply_shifts(stack, [[0, 0], [1, -2]],
    ...                                                       device="cpu")])
    >>> np.argwhere(aligned[1] == 1.0).tolist()  # (the pixel moved by (1, -2))
    [[3, 1]]
    """
    from .rigid import MAX_BIDI, parse_bidi
    from .warp import check_fill

    fill = check_fill(fill)  # (when called, before the input is opened)
    bidi = parse_bidi(bidi)
    if isinstance(bidi, str):
        raise InputError(f"bidi must be a line offset in pixels from -{MAX_BIDI:g} to "
                         f"{MAX_BIDI:g} (the run's settings[\"bidi\"]), got {bidi!r}")
    source = with_axes(as_stack(stack_or_path), parse_axes(axes))
    return _shifted_chunks(source, shifts, channel, fill, resample, crop, chunk_frames, device,
                           gpus, out, bidi)


def _shifted_chunks(stack_or_path, shifts, channel, fill, resample, crop, chunk_frames, device,
                    gpus, out, bidi=0.0):
    """The generator of :func:`apply_shifts` (its ``fill`` and ``bidi`` checked)."""
    from .rigid import bidi_source
    from .warp import shift_frames

    with open_source(stack_or_path, channel) as raw:
        src = bidi_source(raw, bidi)
        shifts = check_shifts(shifts, src.n_frames)
        if src.dtype == np.float64:  # (shifted in float32)
            check_float32_range(src.read(0, 1)[0], "the stack", "its frames are shifted",
                                "scale the stack into that range first")
        y0, y1, x0, x1 = common_area(shifts, src.frame_shape) if crop else (0, None, 0, None)
        h, w = src.frame_shape
        check_out(out, (src.n_frames, (y1 or h) - y0, (x1 or w) - x0))

        def shifted(start, chunk):  # (shift_frames reads the pixel types as float32 itself)
            xp = backend.array_module_of(chunk)
            moved = shift_frames(chunk, xp.asarray(shifts[start:start + len(chunk)]), fill=fill,
                                 method=resample)
            return moved[:, y0:y1, x0:x1]  # (map_chunks brings it to the host)

        if gpus is not None:  # each GPU opens the input again
            yield from map_chunks(lambda: bidi_source(open_source(stack_or_path, channel), bidi),
                                  chunk_frames, shifted, gpus=gpus, out=out)
            return
        xp = backend.xp_for(backend.resolve_device(device))
        yield from map_chunks(lambda: contextlib.nullcontext(src), chunk_frames, shifted, xp=xp,
                              out=out)


def aligned_box(frame_shape, shifts, crop=False, field=None) -> tuple:
    """``(y0, y1, x0, x1)`` of the aligned frames in the input's: the whole frame, or with
    ``crop`` the area every shifted frame covers (every warped one: a motion ``field``)."""
    if not crop:
        return (0, frame_shape[0], 0, frame_shape[1])
    if field is not None:
        from .piecewise import field_area

        return field_area(field, frame_shape)
    return common_area(shifts, frame_shape)


def aligned_channels(source, shifts, channels, frame_shape, *, field=None, centres=None,
                     fill=0.0, resample="bilinear", crop=False, chunk_frames=64, device="cpu",
                     gpus=None, bidi=0.0):
    """``(parts, frame_shape)``: every channel of ``channels`` (``[None]``: the stack's only one)
    of ``source`` (frames of ``frame_shape``) aligned by ``shifts`` (or warped by the motion
    ``field`` at ``centres``), as one tuple a chunk of ``(start, chunk)`` a channel, and the
    aligned frames' shape (the crop's with ``crop``): what
    :func:`xcorr_app.alignment.outputs.write_chunks` writes; ``bidi``: the line offset removed
    from every channel's frames first (rigid shifts only)."""
    from .piecewise import apply_field

    y0, y1, x0, x1 = box = aligned_box(frame_shape, shifts, crop, field)
    if field is not None and bidi:
        raise InputError("bidi applies to rigid shifts; a motion field warps the frames as "
                         "they were scanned")
    if field is not None:  # every frame warped by its motion field
        streams = [apply_field(source, field, centres, channel=c, fill=fill, resample=resample,
                               crop=box, chunk_frames=chunk_frames, device=device)
                   for c in channels]
    else:
        streams = [apply_shifts(source, shifts, channel=c, fill=fill, resample=resample,
                                crop=crop, chunk_frames=chunk_frames, device=device, gpus=gpus,
                                bidi=bidi)
                   for c in channels]
    return zip(*streams), (y1 - y0, x1 - x0)
