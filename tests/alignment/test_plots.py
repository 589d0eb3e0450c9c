"""The drift plot (``drift.png``): a valid PNG of the documented size whose curves, bands and
labels are drawn, without matplotlib (no font discovery, no text layout engine)."""

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from cli_helpers import child_env
from xcorr_app.alignment.outputs import plot_drift
from xcorr_app.alignment.outputs._plots import COLORS, PANELS, PLOT_SIZE, nice_ticks


def _result(shifts, confidence=None, low=None, fft=None, settings=None):
    n = len(shifts)
    return SimpleNamespace(
        shifts=np.asarray(shifts, float),
        fft_shifts=np.full((n, 2), np.nan) if fft is None else fft,
        confidence=np.full(n, 4.0) if confidence is None else confidence,
        low_confidence=np.zeros(n, bool) if low is None else low,
        settings=settings or {})


def _pixels(path):
    with Image.open(path) as im:
        assert im.format == "PNG"
        assert im.size == PLOT_SIZE
        return np.asarray(im.convert("RGB")).astype(int)


def _columns_of(pixels, panel, color, tol=40):
    """The pixel columns inside a panel that hold a pixel of about ``color``."""
    x0, y0, x1, y1 = PANELS[panel]
    inside = pixels[y0 + 2:y1 - 1, x0 + 2:x1 - 1]
    near = (np.abs(inside - np.array(color)).sum(-1) <= tol).any(0)
    return np.flatnonzero(near) + x0 + 2


def _frame_column(frame, n):
    x0, _, x1, _ = PANELS["shifts"]
    lo, hi = -0.02 * (n - 1), 1.02 * (n - 1)
    return x0 + (frame - lo) / (hi - lo) * (x1 - x0)


def test_png_of_the_documented_size_with_both_curves_drawn(tmp_path, rng):
    n = 50
    shifts = np.c_[np.linspace(-3, 5, n), np.linspace(4, -2, n)] + rng.normal(0, 0.2, (n, 2))
    path = tmp_path / "drift.png"
    plot_drift(path, _result(shifts), title="stack.tif: reference first")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = _pixels(path)
    width = PANELS["shifts"][2] - PANELS["shifts"][0]
    for name, panel in (("dy", "shifts"), ("dx", "shifts"), ("confidence", "confidence")):
        cols = _columns_of(pixels, panel, COLORS[name])
        # the curve spans the frames: from the first frame's column to the last one's
        assert len(cols) > 0.9 * width * 0.96, (name, len(cols))
        assert cols[0] <= _frame_column(0, n) + 4 and cols[-1] >= _frame_column(n - 1, n) - 4
    assert not [f for f in tmp_path.iterdir() if f.name != "drift.png"]  # no temporary file


def test_unmeasured_frames_draw_no_curve(tmp_path):
    """The check above can fail: NaN shifts (frames that could not be measured) leave the
    curves' colours out of the panel."""
    path = tmp_path / "drift.png"
    plot_drift(path, _result(np.full((20, 2), np.nan), confidence=np.full(20, np.nan)))
    pixels = _pixels(path)
    assert len(_columns_of(pixels, "shifts", COLORS["dy"])) == 0
    assert len(_columns_of(pixels, "shifts", COLORS["dx"])) == 0
    assert len(_columns_of(pixels, "confidence", COLORS["confidence"])) == 0


def test_low_confidence_frames_are_marked_where_they_are(tmp_path):
    n = 40
    low = np.zeros(n, bool)
    low[10:13] = True
    path = tmp_path / "drift.png"
    plot_drift(path, _result(np.zeros((n, 2)), low=low, settings={"min_confidence": 2.0}))
    pixels = _pixels(path)
    for panel in ("shifts", "confidence"):
        cols = _columns_of(pixels, panel, COLORS["low"], tol=6)
        assert cols.size, panel
        # the band covers frames 10 to 12 and nothing far from them
        assert abs(cols[0] - _frame_column(9.5, n)) <= 3 and abs(cols[-1] - _frame_column(12.5, n)) <= 3
    # the threshold line of --min-confidence is drawn in the confidence panel
    assert len(_columns_of(pixels, "confidence", COLORS["threshold"])) > 100


def test_one_frame_and_inf_confidence(tmp_path):
    path = tmp_path / "drift.png"
    plot_drift(path, _result(np.zeros((1, 2)), confidence=np.array([np.inf])))
    _pixels(path)


def test_frames_without_a_rival_peak_are_said_not_left_blank(tmp_path):
    """inf confidence is not drawn; a line in the panel says how many frames have it."""
    said, blank = tmp_path / "inf.png", tmp_path / "nan.png"
    plot_drift(said, _result(np.zeros((6, 2)), confidence=np.full(6, np.inf)))
    plot_drift(blank, _result(np.zeros((6, 2)), confidence=np.full(6, np.nan)))
    x0, y0, x1, y1 = PANELS["confidence"]
    top_right = (slice(y0 + 4, y0 + 24), slice((x0 + x1) // 2, x1 - 4))
    assert (_pixels(said)[top_right] < 128).any()  # dark text
    assert not (_pixels(blank)[top_right] < 128).any()


def test_many_frames_draw_quickly_as_an_envelope(tmp_path, rng):
    """A million frames: the curves are drawn per pixel column (their extremes kept)."""
    n = 1_000_000
    shifts = np.cumsum(rng.normal(size=(n, 2)), 0)
    # one spike, as far above the walk as the walk spans, must stay visible
    shifts[n // 2, 0] = 2 * shifts[:, 0].max() - shifts[:, 0].min()
    path = tmp_path / "drift.png"
    plot_drift(path, _result(shifts, confidence=rng.uniform(1, 5, n)))
    pixels = _pixels(path)
    x0, y0, x1, y1 = PANELS["shifts"]
    rows = np.flatnonzero((np.abs(pixels[y0 + 2:y1 - 1, x0 + 2:x1 - 1] - COLORS["dy"])
                           .sum(-1) <= 40).any(1))
    assert rows[0] + y0 + 2 < y0 + 0.1 * (y1 - y0)  # the spike reaches the top of the panel


def test_no_matplotlib_and_no_font_discovery():
    """Drawing imports neither matplotlib nor pyplot (whose first figure builds a font cache
    on a fresh machine: seconds)."""
    code = ("import sys, tempfile, numpy as np; from types import SimpleNamespace; "
            "from xcorr_app.alignment.outputs._plots import plot_drift; "
            "r = SimpleNamespace(shifts=np.zeros((5, 2)), fft_shifts=np.zeros((5, 2)), "
            "confidence=np.ones(5), low_confidence=np.zeros(5, bool), settings={}); "
            "plot_drift(tempfile.mkdtemp() + '/d.png', r, title='t'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    env = child_env()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("lo, hi, expect", [(0, 11, [0, 2.5, 5, 7.5, 10]),
                                            (-25.3, 16.1, [-20, -10, 0, 10]),
                                            (0.9, 5.1, [1, 2, 3, 4, 5])])
def test_nice_ticks(lo, hi, expect):
    assert nice_ticks(lo, hi, 6).tolist() == expect


def test_quality_plot_draws_the_worst_patch_region_of_piecewise_runs(tmp_path, rng):
    """quality.png of a piecewise run: each frame's worst patch region after alignment, dashed
    in the threshold's colour across the frames; none without patch regions (and none where
    no region was measured)."""
    from xcorr_app.alignment.outputs import plot_quality

    n = 40
    after = np.full(n, 0.95)
    regions = 0.9 + 0.05 * rng.random((n, 3, 3))
    regions[17, 1, 2] = 0.4  # a bad region: the curve dips there
    args = (np.linspace(0.5, 0.9, n), after, np.zeros((n, 2)), np.zeros(n, bool))
    plain, patched, unmeasured = (tmp_path / f"{k}.png" for k in ("p", "q", "u"))
    plot_quality(plain, *args)
    plot_quality(patched, *args, patch_after=regions, patch_flagged=regions < 0.5)
    plot_quality(unmeasured, *args, patch_after=np.full((n, 3, 3), np.nan))
    red = _columns_of(_pixels(patched), "shifts", COLORS["threshold"])
    width = PANELS["shifts"][2] - PANELS["shifts"][0]
    assert len(red) > 0.3 * width  # (dashed: about half the columns)
    assert red[0] <= _frame_column(0, n) + 10 and red[-1] >= _frame_column(n - 1, n) - 10
    for path in (plain, unmeasured):
        assert len(_columns_of(_pixels(path), "shifts", COLORS["threshold"])) == 0
