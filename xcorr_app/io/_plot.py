"""The drift plot: dy, dx (and the FFT reference) and confidence against frame."""

from __future__ import annotations

import numpy as np


def plot_drift(path, result, title=""):
    """Write ``drift.png`` for an :class:`~xcorr_app.alignment._pipeline.AlignResult` (atomically)."""
    # the object API with the Agg canvas: no pyplot (its import and backend selection cost
    # about half a second of every one-shot run) and no global figure state
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from ._writer import atomic_path

    frames = np.arange(result.n_frames)
    fig = Figure(figsize=(8, 5.5))
    FigureCanvasAgg(fig)
    ax1, ax2 = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    ax1.plot(frames, result.shifts[:, 0], "o-", ms=3, label="dy")
    ax1.plot(frames, result.shifts[:, 1], "s-", ms=3, label="dx")
    if not np.isnan(result.fft_shifts).all():
        ax1.plot(frames, result.fft_shifts[:, 0], ":", color="C0", label="dy (FFT reference)")
        ax1.plot(frames, result.fft_shifts[:, 1], ":", color="C1", label="dx (FFT reference)")
    ax1.set_ylabel("shift to align (px)")
    ax1.legend(loc="best", fontsize=8)
    ax1.grid(alpha=0.3)
    if title:
        ax1.set_title(title, fontsize=10)
    ax2.plot(frames, np.where(np.isfinite(result.confidence), result.confidence, np.nan), ".-",
             color="C2")
    ax2.set_ylabel("confidence")
    ax2.set_xlabel("frame")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
