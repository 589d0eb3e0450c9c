"""The result of :func:`xcorr_app.align`: shifts, their quality, the FFT check, the table.

Examples
--------
>>> import numpy as np
>>> shifts = np.array([[0.0, 0.0], [1.0, 2.0], [9.0, 9.0], [3.0, 4.0]])
>>> interpolate_flagged(shifts, np.array([False, False, True, False])).tolist()
[[0.0, 0.0], [1.0, 2.0], [2.0, 3.0], [3.0, 4.0]]
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from pathlib import Path

import numpy as np

from ..errors import InputError, check_keywords
from ..io import json_number, plural
from .rigid import COLUMN, fft_reference, own_frame


CSV_COLUMNS = ("frame", "source", "dy", "dx", "peak", "confidence", "low_confidence",
               "fft_dy", "fft_dx", "agree")


def interpolate_flagged(shifts, flagged):
    """Replace the shifts of ``flagged`` frames by linear interpolation between their nearest
    unflagged neighbours (the nearest one's shift at the ends); NaN shifts stay NaN and are not
    used as neighbours."""
    shifts = np.array(shifts, dtype=np.float64)
    good = ~np.asarray(flagged, bool) & ~np.isnan(shifts).any(axis=1)
    todo = np.asarray(flagged, bool) & ~np.isnan(shifts).any(axis=1)
    if not good.any() or not todo.any():
        return shifts
    idx = np.arange(len(shifts))
    for axis in range(2):
        shifts[todo, axis] = np.interp(idx[todo], idx[good], shifts[good, axis])
    return shifts


def _csv_field(text: str) -> str:
    text = text.replace('"', '""')
    return f'"{text}"' if ("," in text or '"' in text or "\n" in text) else text


@dataclasses.dataclass
class AlignResult:
    """What :func:`xcorr_app.align` measured.

    Attributes
    ----------
    shifts : (N, 2) float64
        ``(dy, dx)`` to apply to each frame to align it with the reference (NaN where a frame is
        constant or has NaN or Inf pixels: no shift can be measured).  With
        ``interpolate_low``, the shifts of low-confidence frames with a measured shift are
        interpolated from their neighbours.
    peak, confidence : (N,) float64
        Correlation peak value and peak over second peak (``inf``: no second peak).  A frame
        that could not be measured has peak NaN and confidence 0; a peak on the border of the
        window (:attr:`border`) is no distinct peak: confidence 0.
    fft_shifts : (N, 2) float64
        The FFT reference measurement of the same frames (NaN with ``verify=False`` and for
        frames that could not be measured).
    agree : (N,) bool
        Integer peaks of both measurements match (a half-pixel tie counts as a match); false
        where the FFT peak lies outside ``max_shift`` (the drift may exceed the window) and for
        frames that could not be measured.
    sources : list of str
        File each frame came from.
    settings : dict
        The parameters of the run.
    low_confidence : (N,) bool
        Confidence below ``min_confidence``, or a peak on the border of the searched window
        (:attr:`border`), or a frame that could not be measured (constant, NaN or Inf pixels);
        every frame where ``static`` found a pattern fixed on the sensor it could not remove
        (``settings["static"]["unresolved"]``: it may have locked any frame's peak).
    plan : str
        The correlation method the run used (the planner's choice, or ``fft`` / ``phase``).
    border : (N,) bool
        The integer peak lies on the border of the searched window (``|shift| == max_shift``,
        or half the frame without a bound): not a true peak, the drift may exceed the window.
    nonfinite : (N,) bool
        Frames with NaN or Inf pixels (shift NaN); with ``mask="nan"`` those pixels are left
        out and the frame is measured (False).
    notes : list of str
        What the user should know about the result (border peaks, unmeasured frames).
    motion_field : (N, gy, gx, 2) float64 or None
        With ``patches``: the shift ``(dy, dx)`` of every patch of every frame (rigid shift
        plus the patch's deviation; NaN for frames without a rigid shift), None otherwise.
    patch_centres : (gy, gx, 2) float64 or None
        The ``(y, x)`` pixel centre of every patch, where :attr:`motion_field` applies.
    patch_confidence : (N, gy, gx) float64 or None
        Peak over second peak of every patch (0: peak on the border of ``max_deviation``).
    patch_low : (N, gy, gx) bool or None
        Patches whose shift was replaced by the median of their neighbours.
    patch_template : (H, W) float32 or None
        The reference image the patches were measured against (mean-subtracted; float input
        frames multiplied by a power of two, as every frame is prepared: scale-free).
    quality : QualityReport or None
        How much better the aligned frames match their template than the input
        (:mod:`xcorr_app.alignment._quality`; ``quality=False``: None).
    frame_shape : (int, int) or None
        ``(H, W)`` of the frames measured.
    seconds : float or None
        How long the run took, from its start to its result (``shifts.json``'s
        ``seconds_measuring``).
    rotation_deg : (N,) float64 or None
        With ``model="rigid-body"``: the rotation (degrees, counter-clockwise as the image is
        shown) applied about the frame's centre after its shift (:meth:`rigid_body_field`;
        :mod:`xcorr_app.alignment.warp._rigid_body`); None for the translation model.
    """

    shifts: np.ndarray
    peak: np.ndarray
    confidence: np.ndarray
    fft_shifts: np.ndarray
    agree: np.ndarray
    sources: list
    settings: dict
    low_confidence: np.ndarray = None
    plan: str = ""
    source: object = dataclasses.field(default=None, repr=False)
    border: np.ndarray = None
    nonfinite: np.ndarray = None
    notes: list = dataclasses.field(default_factory=list)
    motion_field: np.ndarray = None
    patch_centres: np.ndarray = None
    patch_confidence: np.ndarray = None
    patch_low: np.ndarray = None
    patch_template: np.ndarray = dataclasses.field(default=None, repr=False)
    quality: object = dataclasses.field(default=None, repr=False)
    frame_shape: tuple = None
    seconds: float = None
    rotation_deg: np.ndarray = None

    def __post_init__(self):
        for name in ("low_confidence", "border", "nonfinite"):
            if getattr(self, name) is None:
                setattr(self, name, np.zeros(len(self.shifts), bool))

    def set_field(self, mf) -> None:
        """Keep the :class:`~xcorr_app.alignment.piecewise._motion_field.MotionField` of a patch pass:
        its arrays, its grid in :attr:`settings` ``["patches"]`` and a note on replaced
        patches."""
        self.motion_field, self.patch_centres = mf.field, mf.centres
        self.patch_confidence, self.patch_low = mf.confidence, mf.low
        self.patch_template = mf.template
        g = mf.grid
        self.settings["patches"] = {"grid": list(g.grid), "size": list(g.size),
                                    "overlap": list(g.overlap), "max_deviation": g.max_deviation}
        if mf.low.any():
            k = int(mf.low.sum())
            self.notes.append(f"{k} patch{'' if k == 1 else 'es'} of {mf.low.size} without a distinct peak took the median shift "
                              "of their neighbours")

    def rigid_body_field(self, frame_shape=None):
        """``(field, centres)`` of a rigid-body result (:attr:`rotation_deg`): each frame's
        rotation and shift as the motion field ``(N, 2, 2, 2)`` at the corners of frames of
        ``frame_shape`` (default the run's), what
        :func:`~xcorr_app.alignment.piecewise.apply_field` warps by; None for the translation
        model."""
        if self.rotation_deg is None:
            return None
        from .warp import rigid_body_field

        return rigid_body_field(self.shifts, self.rotation_deg, frame_shape or self.frame_shape)

    def deviation(self):
        """``(N, gy, gx, 2)``: :attr:`motion_field` minus the rigid :attr:`shifts` (None
        without patches)."""
        if self.motion_field is None:
            return None
        return self.motion_field - self.shifts[:, None, None, :]

    @property
    def n_frames(self) -> int:
        return len(self.shifts)

    @property
    def constant_frames(self) -> np.ndarray:
        """Indices of the constant frames (shift NaN; frames with NaN pixels not included)."""
        return np.flatnonzero(np.isnan(self.shifts).any(axis=1) & ~self.nonfinite)

    def interpolated_frames(self) -> int:
        """How many flagged frames got shifts interpolated from their neighbours (0 without
        ``interpolate_low``, or when no frame was confident enough to interpolate from)."""
        measured = ~np.isnan(self.shifts).any(axis=1)
        if not self.settings.get("interpolate_low") or not (~self.low_confidence
                                                            & measured).any():
            return 0
        return int((self.low_confidence & measured).sum())

    def summary(self) -> dict:
        """Agreement rate and RMS difference to the FFT reference, drift extent, flags.

        ``agreement`` is over all frames: a frame that could not be measured does not agree;
        ``rms_vs_fft`` is over the frames both measured.  ``low_confidence_frames``: frames
        below ``min_confidence``; ``flagged_frames``: all frames flagged ``low_confidence``
        (those, border peaks and unmeasured frames); ``interpolated_frames``: those of them
        whose shifts were interpolated (:meth:`interpolated_frames`); ``notes``: what to tell
        the user.
        """
        ok = ~np.isnan(self.shifts).any(axis=1)
        verified = ok & ~np.isnan(self.fft_shifts).any(axis=1)
        diff = self.shifts[verified] - self.fft_shifts[verified]
        checked = self.settings.get("verify", bool(verified.any()))
        below = self.settings.get("min_confidence")
        return {
            "frames": self.n_frames,
            "constant_frames": len(self.constant_frames),
            "nonfinite_frames": int(self.nonfinite.sum()),
            "border_frames": int(self.border.sum()),
            "low_confidence_frames": 0 if below is None
            else int(((self.confidence < below) & ok).sum()),
            "flagged_frames": int(self.low_confidence.sum()),
            "interpolated_frames": self.interpolated_frames(),
            "agreement": float(self.agree.mean()) if checked and self.n_frames
            else float("nan"),
            "rms_vs_fft": float(np.sqrt(np.mean(diff ** 2))) if verified.any() else float("nan"),
            "max_abs_shift": float(np.nanmax(np.abs(self.shifts))) if ok.any() else float("nan"),
            "plan": self.plan,
            "notes": list(self.notes),
            **({} if self.quality is None else {"quality": self.quality.summary()}),
        }

    def csv_text(self) -> str:
        """The shifts table (``shifts.csv``), one row per frame."""
        n = self.n_frames
        # (columns as Python values at once: NumPy scalars indexed one by one are slow)
        dy, dx = np.asarray(self.shifts, np.float64).reshape(n, 2).T.tolist()
        fy, fx = np.asarray(self.fft_shifts, np.float64).reshape(n, 2).T.tolist()
        peak = np.asarray(self.peak, np.float64).tolist()
        conf = np.asarray(self.confidence, np.float64).tolist()
        words = ("false", "true")
        low = [words[v] for v in np.asarray(self.low_confidence, bool).tolist()]
        agree = [words[v] for v in np.asarray(self.agree, bool).tolist()]
        fields = {}  # (a file's frames share its field)
        sources = [fields[s] if s in fields else fields.setdefault(s, _csv_field(s))
                   for s in (self.sources[i] for i in range(n))]
        rows = [",".join(CSV_COLUMNS)]
        # dy, dx as they are (shortest round trip): xcorr apply redoes aligned.tif from them
        rows += [f"{i},{s},{a!r},{b!r},{p:.6g},{c:.4g},{lo},{e:.4f},{f:.4f},{ag}"
                 for i, (s, a, b, p, c, lo, e, f, ag)
                 in enumerate(zip(sources, dy, dx, peak, conf, low, fy, fx, agree))]
        if self.rotation_deg is not None:  # (rigid-body: a last column; xcorr apply reads it)
            angles = np.asarray(self.rotation_deg, np.float64).tolist()
            rows = [rows[0] + ",rotation_deg"] + [f"{r},{a!r}"
                                                  for r, a in zip(rows[1:], angles)]
        return "\n".join(rows) + "\n"

    def frame_records(self) -> list:
        """The table as a list of dicts, JSON-ready (:func:`json_number`: NaN becomes ``None``,
        an infinite confidence the string ``"inf"`` as in ``shifts.csv``); ``peak_on_border``
        is :attr:`border`."""
        num = json_number
        quality = None if self.quality is None else self.quality.records()
        return [{"frame": i, "source": self.sources[i], "dy": num(self.shifts[i, 0]),
                 "dx": num(self.shifts[i, 1]), "peak": num(self.peak[i]),
                 "confidence": num(self.confidence[i]),
                 "low_confidence": bool(self.low_confidence[i]),
                 "fft_dy": num(self.fft_shifts[i, 0]), "fft_dx": num(self.fft_shifts[i, 1]),
                 "agree": bool(self.agree[i]), "peak_on_border": bool(self.border[i]),
                 **({} if self.rotation_deg is None
                    else {"rotation_deg": num(self.rotation_deg[i])}),
                 **(quality[i] if quality else {})}
                for i in range(self.n_frames)]

    def save(self, folder, *, aligned=True, format="tiff", plots=True, force=False,
             resample="bilinear", crop=False, fill=0.0, keep_dtype=False, channels=None,
             warp=None, progress=None, in_place=False) -> dict:
        """Write what ``xcorr align`` writes into ``folder``, together or not at all.

        ``shifts.csv``, ``shifts.json``, ``drift.png``, ``quality.png`` (with the quality
        report), ``motion_field.npz`` and ``motion_field.png`` (with ``patches``) and the
        aligned stack, warped from the run's input on the run's device.  The guards of the
        command hold: no output replaces an input, existing outputs are kept without
        ``force``, one writer at a time, and a run that fails or is interrupted leaves nothing.

        Parameters
        ----------
        folder : str or Path
            The outputs folder (made if missing).
        aligned : bool
            Write the aligned stack (``--no-aligned``: False; an aligned stack of an earlier
            run in ``folder``, one beside its ``shifts.json``, is then removed with ``force``,
            as it no longer matches the shifts; any other ``aligned.tif`` there is someone's
            file: refused, ``force`` or not).
        format : {"tiff", "ome-tiff", "ome-zarr", "hdf5", "hdf5:/NAME", "nwb"}
            The aligned stack's format: ``aligned.tif`` (ImageJ), ``aligned.ome.tif``,
            ``aligned.ome.zarr`` (OME-NGFF 0.5 on Zarr v3 for an OME-Zarr 0.5 input, else 0.4
            on Zarr v2) or ``aligned.h5`` (``--out-format``; dataset ``/aligned``, or
            ``/NAME`` with ``hdf5:/NAME``, e.g. ``hdf5:/data`` as suite2p reads), with the
            input's pixel size, channel names and frame interval; ``aligned.nwb`` (an NWB
            input only, needs pynwb): a copy of the input with a ``MotionCorrection`` in
            ``processing["ophys"]`` (docs/cli.md, "NWB output").
        in_place : bool
            With ``format="nwb"``: write the ``MotionCorrection`` into the NWB input itself
            (replaced by a completed copy) instead of ``aligned.nwb``; ``force`` replaces an
            earlier xcorr run's.
        plots : bool
            Write ``drift.png``, ``quality.png`` and ``motion_field.png``.
        force : bool
            Replace existing outputs.
        resample, crop, fill, keep_dtype
            How the aligned stack is warped and stored (``--resample``, ``--crop``, ``--fill``,
            ``--keep-dtype``).
        channels : sequence of int, optional
            Channels of a multi-channel input written aligned by these shifts into one
            hyperstack (``--apply-to``).
        warp : callable, optional
            ``warp(resample=, crop=, fill=)`` (the options as checked here): the aligned
            frames' ``(start, chunk)`` warped elsewhere, or None where it does not warp them
            (a Dask cluster: :func:`xcorr_app.dask.aligned_blocks`); default: warped here.
        progress : callable(int), optional
            Called with the number of aligned frames written after each chunk.

        Returns
        -------
        dict
            File name -> path written (the aligned stack under its own name, ``aligned.h5``
            say; an NWB input written ``in_place`` under the input's).

        Examples
        --------
        >>> import tempfile
        >>> from pathlib import Path
        >>> from xcorr_app import align
        >>> res = align("sample_data/moon_drift.tif", max_shift=8, device="cpu")  # doctest: +SKIP
        >>> res.save(Path(tempfile.mkdtemp()) / "moon")  # doctest: +SKIP
        {'shifts.csv': ..., 'aligned.tif': PosixPath('.../moon/aligned.tif')}
        """
        from ..io import parse_out_format
        from .outputs import (RunOutputs, aligned_of, channel_metadata, channels_of,
                              check_channels, check_save)

        if isinstance(folder, bytes) or not isinstance(folder, (str, os.PathLike)) \
                or not str(folder):
            raise InputError(f"folder must be a path (a str or a pathlib.Path), got "
                             f"{folder!r}" if isinstance(folder, str)
                             else f"folder must be a path (a str or a pathlib.Path), got "
                             f"{type(folder).__name__}")
        if self.source is None:
            raise InputError("this result does not know its input; align a path or an array "
                             "with xcorr_app.align to save it")
        format, dataset = parse_out_format(format)  # (hdf5:/NAME: its dataset)
        fill = check_save(patches=self.motion_field is not None, aligned=aligned,
                          model="translation" if self.rotation_deg is None else "rigid-body",
                          format=format, resample=resample, crop=crop, fill=fill,
                          keep_dtype=keep_dtype, channels=channels, in_place=in_place,
                          plots=plots, force=force)
        if channels is not None:
            measured = self.settings.get("channel")
            channels = check_channels(channels, channels_of(self.source, measured), measured)
        inputs, how, made = [], None, None
        if aligned:  # (a type the format cannot hold: refused before anything is written)
            measured = self.settings.get("channel")
            how = channel_metadata(aligned_of(self.source, measured, keep_dtype, format,
                                              dataset, force, fill), channels, measured)
        if isinstance(self.source, (str, Path)):
            from ..io import split_source

            inputs.append(split_source(self.source)[0])
        with RunOutputs(folder, aligned=aligned, format=format, plots=plots,
                        quality=self.quality is not None,
                        patches=self.motion_field is not None, force=force,
                        inputs=inputs, in_place=inputs[0] if in_place else None) as outs:
            if aligned:
                made = self.aligned_frames(channels=channels, resample=resample, crop=crop,
                                           fill=fill, warp=warp)
            return outs.write(self, frames=made, resample=resample, crop=crop, fill=fill,
                              aligned=how, progress=progress)

    def aligned_frames(self, *, channels=None, resample="bilinear", crop=False, fill=0.0,
                       warp=None):
        """``(parts, frame_shape, channels)`` of the aligned stack that :meth:`save` writes
        (:func:`~xcorr_app.alignment.outputs.write_chunks`): by ``warp`` (:meth:`save`'s) where
        it warps them, else here on the run's device (its GPUs with ``gpus``)."""
        from ._apply import aligned_box, aligned_channels

        frames = None if warp is None or channels is not None else \
            warp(resample=resample, crop=crop, fill=fill)
        if frames is not None:
            y0, y1, x0, x1 = aligned_box(self.frame_shape, self.shifts, crop)
            return ((part,) for part in frames), (y1 - y0, x1 - x0), 1
        field, centres = self.motion_field, self.patch_centres
        if self.rotation_deg is not None:  # (rigid-body: the field of its rotation and shift)
            field, centres = self.rigid_body_field()
        parts, shape = aligned_channels(
            self.source, self.shifts, [self.settings.get("channel")] if channels is None
            else channels, self.frame_shape, field=field, centres=centres, fill=fill,
            resample=resample, crop=crop, chunk_frames=self.settings.get("chunk_frames") or 64,
            device=self.settings.get("device", "cpu"), bidi=self.settings.get("bidi") or 0.0,
            gpus=None if field is not None else self.settings.get("gpus"))
        return parts, shape, 1 if channels is None else len(channels)

    def apply(self, stack_or_path=None, **kwargs):
        """The aligned frames: :func:`xcorr_app.apply_shifts` with these shifts, on the input
        of the run unless another stack is given; yields ``(start, chunk)``.  The line offset
        the run removed (``settings["bidi"]``) is removed from the frames first, unless
        ``bidi=`` says another (0: none).  A rigid-body result (:attr:`rotation_deg`) rotates
        and shifts every frame in one resampling (``resample`` bilinear or cubic; frames of
        the run's size)."""
        from ._apply import apply_shifts
        from .piecewise import apply_field
        from .warp import check_fill

        field = self.motion_field is not None or self.rotation_deg is not None
        # (a misspelt keyword, or one the warp does not take: a TypeError inside)
        check_keywords(kwargs, _keyword_options(apply_field) | {"bidi"} if field
                       else _keyword_options(apply_shifts))
        if "fill" in kwargs:  # (now, not when the first chunk is asked for)
            kwargs["fill"] = check_fill(kwargs["fill"])
        target = self.source if stack_or_path is None else stack_or_path
        if target is None:
            raise InputError("this result does not know its input; pass the stack or path")
        kwargs.setdefault("channel", self.settings.get("channel"))
        if self.settings.get("chunk_frames"):  # the run's chunk (auto: larger for small frames)
            kwargs.setdefault("chunk_frames", self.settings["chunk_frames"])
        if field:
            from .rigid import parse_bidi

            kwargs.setdefault("device", self.settings.get("device", "auto"))
            if parse_bidi(kwargs.pop("bidi", 0.0)) not in (0.0, "off"):  # ("0": none too)
                raise InputError("bidi applies to rigid shifts; this result holds a motion "
                                 "field" if self.motion_field is not None else "bidi applies "
                                 "to rigid shifts; this result holds rotations too")
            if self.motion_field is not None:  # patches: every frame warped by its field
                return apply_field(target, self.motion_field, self.patch_centres, **kwargs)
            # rigid-body: every frame rotated and shifted, one resampling (its corners' field)
            _check_frame_shape(target, kwargs.get("channel"), self.frame_shape)
            return apply_field(target, *self.rigid_body_field(), **kwargs)
        kwargs.setdefault("bidi", self.settings.get("bidi") or 0.0)  # (the run's line offset)
        return apply_shifts(target, self.shifts, **kwargs)


def _keyword_options(fn) -> set:
    """The keyword-only options of ``fn``."""
    return {p.name for p in inspect.signature(fn).parameters.values()
            if p.kind is p.KEYWORD_ONLY}


def _check_frame_shape(target, channel, frame_shape):
    """InputError where ``target``'s frames are not of ``frame_shape`` (a rigid-body result
    rotates about the centre of the frames it measured)."""
    from ..io import open_source
    from ._options import as_stack

    with open_source(as_stack(target), channel) as src:
        got = tuple(src.frame_shape)
    if frame_shape is not None and got != tuple(frame_shape):
        raise InputError(f"this rigid-body result rotates frames of {frame_shape[0]}x"
                         f"{frame_shape[1]} px about their centre; the stack has frames of "
                         f"{got[0]}x{got[1]}")


def agreement(shifts, fft_shifts_, fft_int, max_shift):
    """Integer peaks match (up to a half-pixel tie) and the FFT peak lies inside the bound.

    A tie: the true shift lies near ``x.5`` so the two integer peaks differ by one while the
    subpixel estimates are within half a pixel of each other.  An FFT peak outside
    ``max_shift`` never agrees: either the drift exceeds the window (the bounded search
    cannot have found it) or the two measurements disagree.
    """
    main_int = np.round(shifts)
    diff = np.abs(main_int - fft_int)
    same = (diff == 0).all(axis=1)
    same |= (diff <= 1).all(axis=1) & (np.abs(shifts - fft_shifts_) < 0.5).all(axis=1)
    if max_shift is not None:
        same &= ~(np.abs(fft_int) > np.asarray(max_shift)).any(axis=1)
    return same

def _accumulate(steps, const):
    """Frame-to-frame steps -> shifts against the first frame; an unmeasurable frame
    (constant, NaN or Inf pixels) contributes no step: the frame after it was measured against
    the last measurable frame before it
    (:func:`~xcorr_app.alignment.rigid._measure.previous_references`), so its step spans both."""
    steps = np.where(const[:, None] | np.isnan(steps), 0.0, steps)
    usable = np.flatnonzero(~const)
    steps[:usable[0] + 1 if len(usable) else len(steps)] = 0.0  # the chain's start: itself
    return np.cumsum(steps, axis=0)

def result_notes(border, const, nonfinite, fft_outside, bound, bounded):
    """The notes of a result: peaks on the border of the window, unmeasured frames."""
    notes = []
    if border.any():
        window = (f"the max_shift window (+-{bound[0]}, +-{bound[1]} px)" if bounded else
                  f"the search window (half the frame, +-{bound[0]}, +-{bound[1]} px)")
        notes.append(f"{plural(int(border.sum()), 'frame')} peaked on the border of {window}: "
                     "the drift may exceed it (flagged low_confidence"
                     + ("; widen max_shift)" if bounded else ")"))
    if fft_outside.any():
        notes.append(f"the FFT reference found a shift outside max_shift on "
                     f"{plural(int(fft_outside.sum()), 'frame')} (counted as not agreeing)")
    if const.any():
        notes.append(f"{plural(int(const.sum()), 'constant frame')}: shift undefined (NaN), "
                     "flagged low_confidence, left unshifted")
    if nonfinite.any():
        notes.append(f"{plural(int(nonfinite.sum()), 'frame')} with NaN or Inf pixels: shift "
                     "not measured (NaN), flagged low_confidence, left unshifted; replace those "
                     "pixels (for example with the frame median) to measure them")
    return notes


def result_from_table(opts, table, sources, settings, plan, source=None, untrusted=False):
    """The :class:`AlignResult` of a run's full table: agreement, accumulation of ``previous``
    steps, unmeasurable frames, border peaks, low-confidence flags and interpolation
    (``untrusted``: every frame flagged ``low_confidence``, none to interpolate from).

    A frame that is constant or has NaN or Inf pixels gets NaN shifts, peak and FFT shifts,
    confidence 0, ``agree`` false and ``low_confidence`` true; a frame whose peak lies on the
    border of the searched window gets confidence 0 and ``low_confidence`` true (its shift is
    kept: it is the best inside the window, but the drift may exceed it); the frame that is the
    reference (:func:`~.rigid.own_frame`) gets a shift of exactly 0.  Other frames are
    untouched.
    """
    c = COLUMN
    n = len(table)
    # (copies: the table stays as measured, the result can be made from it again)
    shifts = table[:, c["dy"]:c["dx"] + 1].copy()
    peak, conf = table[:, c["peak"]].copy(), table[:, c["confidence"]].copy()
    nonfinite = table[:, c["finite"]] == 0
    const = (table[:, c["constant"]] == 1) & ~nonfinite
    unusable = const | nonfinite
    border = (table[:, c["border"]] == 1) & ~unusable
    fft_sh = table[:, c["fft_dy"]:c["fft_dx"] + 1].copy()
    fft_int = table[:, c["fft_iy"]:c["fft_ix"] + 1]
    agree = agreement(shifts, fft_sh, fft_int, opts.max_shift) if opts.verify else np.zeros(n, bool)
    fft_outside = np.zeros(n, bool)
    if opts.verify and opts.max_shift is not None:
        fft_outside = (np.abs(fft_int) > np.asarray(opts.max_shift)).any(axis=1) & ~unusable
    if opts.previous:
        shifts = _accumulate(shifts, unusable)
        if opts.verify:  # (unchecked: NaN steps, which the chain would make zeros)
            fft_sh = _accumulate(fft_sh, unusable)
    own = own_frame(opts.reference, n)
    if own is not None and np.isfinite(shifts[own]).all():
        # (the reference itself: its fit's rounding, about 1e-8 px, blended an edge of the
        # aligned frame with the fill, a row of NaN with fill=nan)
        shifts[own] = 0.0
    shifts[unusable] = np.nan
    fft_sh[unusable] = np.nan
    peak[unusable] = np.nan
    conf[unusable | border] = 0.0  # no distinct peak
    agree[unusable] = False
    low = unusable | border | untrusted
    if opts.min_confidence is not None:
        low |= conf < opts.min_confidence
    stuck = []  # (a note never claims an interpolation that did not happen)
    if opts.interpolate_low:
        measured = ~np.isnan(shifts).any(axis=1)
        if (low & measured).any() and not (~low & measured).any():
            stuck = [f"interpolate_low: no frame was confident enough to interpolate from, so "
                     f"the shifts of {plural(int((low & measured).sum()), 'low-confidence frame')}"
                     " are kept as measured (flagged low_confidence)"]
        shifts = interpolate_flagged(shifts, low)
    ref = opts.reference
    settings = {"reference": str(ref) if not hasattr(ref, "shape") else "array",
                "max_shift": list(opts.max_shift) if opts.max_shift else None,
                "normalization": opts.normalization, "prefilter": opts.prefilter or "none",
                "window": opts.window or "none", "subpixel": opts.subpixel,
                "upsample": opts.upsample_factor, "verify": opts.verify,
                "fft_reference": fft_reference(opts.normalization)[1] if opts.verify else None,
                "min_confidence": opts.min_confidence, "interpolate_low": opts.interpolate_low,
                "channel": opts.channel, "features": opts.features,
                "boundary": "circular" if opts.boundary == "circular" else "linear",
                **settings}
    bound = settings.get("search_range") or opts.max_shift
    notes = result_notes(border, const, nonfinite, fft_outside, bound, opts.max_shift is not None)
    notes += stuck
    if settings.get("device_note"):  # device="auto" chose the CPU (backend.decide_device)
        notes.append(settings["device_note"])
    if opts.previous and (const | nonfinite).any():
        notes.append("reference previous: a frame after an unmeasurable one was measured against "
                     "the last measurable frame before it")
    return AlignResult(shifts, peak, conf, fft_sh, agree, sources, settings, low,
                       str(plan) if plan is not None else "", source, border, nonfinite, notes)
