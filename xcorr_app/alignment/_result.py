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
        from ._pipeline import apply_shifts

        target = self.source if stack_or_path is None else stack_or_path
        if target is None:
            raise ValueError("this result does not know its input; pass the stack or path")
        kwargs.setdefault("channel", self.settings.get("channel"))
        return apply_shifts(target, self.shifts, **kwargs)
