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

import numpy as np

from ..errors import InputError
from ._options import fft_reference

#: columns of the per-frame result block copied back from the device once per chunk
COLUMNS = ("dy", "dx", "peak", "confidence", "constant", "finite", "fft_dy", "fft_dx",
            "fft_iy", "fft_ix")
COLUMN = {name: i for i, name in enumerate(COLUMNS)}

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
        constant and no shift can be measured).  With ``interpolate_low``, the shifts of
        low-confidence frames are interpolated from their neighbours.
    peak, confidence : (N,) float64
        Correlation peak value and peak over second peak.
    fft_shifts : (N, 2) float64
        The FFT reference measurement of the same frames (NaN with ``verify=False``).
    agree : (N,) bool
        Integer peaks of both measurements match (or the FFT peak lies outside ``max_shift``).
    sources : list of str
        File each frame came from.
    settings : dict
        The parameters of the run.
    low_confidence : (N,) bool
        Confidence below ``min_confidence``.
    plan : str
        The correlation method the run used (the planner's choice, or ``fft`` / ``phase``).
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

    def __post_init__(self):
        if self.low_confidence is None:
            self.low_confidence = np.zeros(len(self.shifts), bool)

    @property
    def n_frames(self) -> int:
        return len(self.shifts)

    @property
    def constant_frames(self) -> np.ndarray:
        return np.flatnonzero(np.isnan(self.shifts).any(axis=1))

    def summary(self) -> dict:
        """Agreement rate and RMS difference to the FFT reference, drift extent, flags."""
        ok = ~np.isnan(self.shifts).any(axis=1)
        verified = ok & ~np.isnan(self.fft_shifts).any(axis=1)
        diff = self.shifts[verified] - self.fft_shifts[verified]
        return {
            "frames": self.n_frames,
            "constant_frames": int((~ok).sum()),
            "low_confidence_frames": int(self.low_confidence.sum()),
            "agreement": float(self.agree[verified].mean()) if verified.any() else float("nan"),
            "rms_vs_fft": float(np.sqrt(np.mean(diff ** 2))) if verified.any() else float("nan"),
            "max_abs_shift": float(np.nanmax(np.abs(self.shifts))) if ok.any() else float("nan"),
            "plan": self.plan,
        }

    def csv_text(self) -> str:
        """The shifts table (``shifts.csv``), one row per frame."""
        rows = [",".join(CSV_COLUMNS)]
        for i in range(self.n_frames):
            dy, dx = self.shifts[i]
            fy, fx = self.fft_shifts[i]
            rows.append(f"{i},{_csv_field(self.sources[i])},{dy:.4f},{dx:.4f},{self.peak[i]:.6g},"
                        f"{self.confidence[i]:.4g},{str(bool(self.low_confidence[i])).lower()},"
                        f"{fy:.4f},{fx:.4f},{str(bool(self.agree[i])).lower()}")
        return "\n".join(rows) + "\n"

    def frame_records(self) -> list:
        """The table as a list of dicts (JSON-ready: NaN and inf become None)."""
        def num(v):
            v = float(v)
            return v if np.isfinite(v) else None

        return [{"frame": i, "source": self.sources[i], "dy": num(self.shifts[i, 0]),
                 "dx": num(self.shifts[i, 1]), "peak": num(self.peak[i]),
                 "confidence": num(self.confidence[i]),
                 "low_confidence": bool(self.low_confidence[i]),
                 "fft_dy": num(self.fft_shifts[i, 0]), "fft_dx": num(self.fft_shifts[i, 1]),
                 "agree": bool(self.agree[i])} for i in range(self.n_frames)]

    def apply(self, stack_or_path=None, **kwargs):
        """The aligned frames: :func:`xcorr_app.apply_shifts` with these shifts, on the input
        of the run unless another stack is given; yields ``(start, chunk)``."""
        from ._apply import apply_shifts

        target = self.source if stack_or_path is None else stack_or_path
        if target is None:
            raise InputError("this result does not know its input; pass the stack or path")
        kwargs.setdefault("channel", self.settings.get("channel"))
        return apply_shifts(target, self.shifts, **kwargs)


def agreement(shifts, fft_shifts_, fft_int, max_shift):
    """Integer peaks match (up to a half-pixel tie), or the FFT peak lies outside the bound.

    A tie: the true shift lies near ``x.5`` so the two integer peaks differ by one while the
    subpixel estimates are within half a pixel of each other.
    """
    main_int = np.round(shifts)
    diff = np.abs(main_int - fft_int)
    same = (diff == 0).all(axis=1)
    same |= (diff <= 1).all(axis=1) & (np.abs(shifts - fft_shifts_) < 0.5).all(axis=1)
    if max_shift is not None:
        same |= (np.abs(fft_int) > np.asarray(max_shift)).any(axis=1)
    return same

def _accumulate(steps, const):
    """Frame-to-frame steps -> shifts against the first frame; a constant frame (or one after
    a constant frame) contributes no step."""
    const_step = const | np.roll(const, 1)
    const_step[0] = const[0]
    steps = np.where(const_step[:, None] | np.isnan(steps), 0.0, steps)
    steps[0] = 0.0
    return np.cumsum(steps, axis=0)

def result_from_table(opts, table, sources, settings, plan, source=None):
    """The :class:`AlignResult` of a run's full table: agreement, accumulation of ``previous``
    steps, constant frames, low-confidence flags and interpolation."""
    c = COLUMN
    n = len(table)
    shifts = table[:, c["dy"]:c["dx"] + 1]
    peak, conf = table[:, c["peak"]], table[:, c["confidence"]]
    const = table[:, c["constant"]] == 1
    fft_sh, fft_int = table[:, c["fft_dy"]:c["fft_dx"] + 1], table[:, c["fft_iy"]:c["fft_ix"] + 1]
    agree = agreement(shifts, fft_sh, fft_int, opts.max_shift) if opts.verify else np.zeros(n, bool)
    if opts.previous:
        shifts, fft_sh = _accumulate(shifts, const), _accumulate(fft_sh, const)
    shifts[const] = np.nan
    conf[const] = 0.0
    agree[const] = False
    low = np.zeros(n, bool) if opts.min_confidence is None else \
        (conf < opts.min_confidence) & ~const
    if opts.interpolate_low:
        shifts = interpolate_flagged(shifts, low)
    ref = opts.reference
    settings = {"reference": str(ref) if not hasattr(ref, "shape") else "array",
                "max_shift": list(opts.max_shift) if opts.max_shift else None,
                "normalization": opts.normalization, "prefilter": opts.prefilter or "none",
                "window": opts.window or "none", "subpixel": opts.subpixel,
                "upsample": opts.upsample, "verify": opts.verify,
                "fft_reference": fft_reference(opts.normalization)[1] if opts.verify else None,
                "min_confidence": opts.min_confidence, "interpolate_low": opts.interpolate_low,
                "channel": opts.channel, "features": opts.features, **settings}
    return AlignResult(shifts, peak, conf, fft_sh, agree, sources, settings, low,
                       str(plan) if plan is not None else "", source)
