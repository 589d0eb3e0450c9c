"""``xcorr bench accuracy``: the error of xcorr's alignment (default and options, on the CPU)
and of scikit-image's ``phase_cross_correlation`` against the exact drift of hard stacks
(:mod:`xcorr_app.bench._accuracy_data`), over several seeds.

The error of a stack is the RMS over its frames (frame 0, the reference, left out) of the
Euclidean distance between measured and true shift, in px; its max is the largest such distance.
It splits exactly (:func:`error_split`) into the offset that all frames share (for shifts
relative to frame 0, mostly frame 0's own error: one draw per stack) and the per-frame part.

Examples
--------
>>> stack_errors([[0, 0], [1, 1], [2, 2]], [[0, 0], [1, 1], [2, 2.5]])
(0.3536, 0.5)
>>> error_split([[0, 0], [1, 1], [2, 2]], [[0, 0], [1, 1], [2, 2.5]])
(0.25, 0.25)
>>> spread([0.25, 0.75, 0.5])
(0.5, 0.25, 0.75)
"""

from __future__ import annotations

import json
import math
import platform

import numpy as np

from ..errors import InputError
from ._accuracy_data import KINDS, make_stack
from ._common import reason, utc_now

__all__ = ["METHODS", "DEFAULT", "BEFORE", "TARGET_EVERY", "TARGET_MEAN", "TARGET_CIRCULAR",
           "ORACLE", "stack_errors", "error_split", "spread", "oracle_shifts", "measure",
           "report_lines", "main"]

#: the default: what ``xcorr align`` does without options
DEFAULT = "xcorr default"
#: method name -> keyword arguments of :func:`xcorr_app.align` (on the CPU), or ("skimage",
#: normalization) for ``phase_cross_correlation`` with upsample 100
#: the earlier default (one pass against the first frame, gaussian:1, linear); the
#: rows marked "alone" change one thing of it, so each shows that option's own effect
#: (``boundary=circular`` is the circular refinement, the former ``subpixel=upsample``)
#: (and no Lucas-Kanade step); the refined rows show the template alone (``lucas_kanade`` off)
BEFORE = {"reference": "first", "prefilter": "gaussian:1", "boundary": "linear",
          "lucas_kanade": "off"}
METHODS = {
    DEFAULT: {},
    "xcorr lucas_kanade=off": {"lucas_kanade": "off"},
    "xcorr reference=refined": {"reference": "refined", "lucas_kanade": "off"},
    "xcorr reference=refined:2": {"reference": "refined:2", "lucas_kanade": "off"},
    "xcorr before (first, gaussian:1, linear)": BEFORE,
    "xcorr prefilter=auto alone": {**BEFORE, "prefilter": "auto"},
    "xcorr boundary=circular alone": {**BEFORE, "boundary": "circular"},
    "xcorr lucas_kanade=on alone": {**BEFORE, "lucas_kanade": "on"},
    # prefilter auto's band-pass (alignment._preprocess.AUTO_BANDPASS; a test keeps them equal)
    "xcorr prefilter=dog:1,4 alone": {**BEFORE, "prefilter": "dog:1,4"},
    "xcorr normalization=phase": {**BEFORE, "normalization": "phase"},
    "skimage pcc phase": ("skimage", "phase"),
    "skimage pcc none": ("skimage", None),
}
#: the row of the floor in the report (:func:`oracle_shifts`)
ORACLE = "oracle (fit against the noise-free scene: the floor)"
#: the targets for the default (RMS px): every kind's mean, the mean over all stacks, and
#: the circular kind's mean
TARGET_EVERY = 0.1
TARGET_MEAN = 0.04
TARGET_CIRCULAR = 0.05
SKIMAGE_UPSAMPLE = 100


def stack_errors(measured, truth) -> tuple:
    """``(rms, max)`` px of the per-frame Euclidean error, frame 0 left out, rounded to 1e-4."""
    d = np.asarray(measured, np.float64)[1:] - np.asarray(truth, np.float64)[1:]
    e = np.hypot(d[:, 0], d[:, 1])
    if e.size == 0:
        return 0.0, 0.0
    if not np.all(np.isfinite(e)):
        return math.inf, math.inf
    return round(float(np.sqrt(np.mean(e ** 2))), 4), round(float(e.max()), 4)


def error_split(measured, truth) -> tuple:
    """``(shared, per_frame)`` px, rounded to 1e-4: the length of the mean error vector over
    frames 1.. (an offset common to every frame: with shifts relative to frame 0, mostly frame
    0's own error, which enters every frame once and no method removes) and the RMS of what
    is left; ``rms ** 2 == shared ** 2 + per_frame ** 2`` (:func:`stack_errors`).

    Over stacks, the shared part is one draw of a frame's error, the per-frame part the RMS of
    N - 1 of them: with as noisy a frame 0 as the others, a stack's RMS is in expectation
    about ``sqrt(2)`` times its per-frame part, and the per-frame part is the steadier measure
    of a method (on the low-light stacks, seeds 0-2 drew a small shared part: see
    docs/how-align-works.md)."""
    d = np.asarray(measured, np.float64)[1:] - np.asarray(truth, np.float64)[1:]
    if d.size == 0:
        return 0.0, 0.0
    if not np.all(np.isfinite(d)):
        return math.inf, math.inf
    mean = d.mean(axis=0)
    rest = np.sqrt(np.mean(((d - mean) ** 2).sum(axis=1)))
    return round(float(np.hypot(*mean)), 4), round(float(rest), 4)


def spread(values) -> tuple:
    """``(mean, min, max)`` of finite-or-not values."""
    v = [float(x) for x in values]
    return sum(v) / len(v), min(v), max(v)


def oracle_shifts(stack) -> np.ndarray:
    """The floor of a stack: every frame's shift fitted against the noise-free scene the
    generator drew it from (:class:`~xcorr_app.bench._accuracy_data.AccuracyStack`'s
    ``clean``, its exact ``gradient``), relative to frame 0's fit as every method's shifts are.

    Per frame, one Gauss-Newton step from the true shift of the model ``frame = clean +
    gradient . ds + alpha * moving + beta`` (a gain and an offset that the fit does not know),
    weighted by the Poisson variance (``clean``): the maximum-likelihood estimate to first
    order, at the Cramer-Rao bound.  Frame 0's own noise stays in (its fit is subtracted),
    which no method can remove; the circular stacks have no noise (0).

    >>> from xcorr_app.bench._accuracy_data import make_stack
    >>> s = make_stack("plain", 0, quick=True)
    >>> got = oracle_shifts(s)
    >>> got[0].tolist(), bool(stack_errors(got, s.truth)[0] < 0.05)
    ([0.0, 0.0], True)
    """
    clean = np.asarray(stack.clean, np.float64)
    frames = np.asarray(stack.frames, np.float64)
    out = np.array(stack.truth, np.float64)
    floor = 1e-3 * max(float(clean.max()), 1e-12)
    for i in range(len(frames)):
        lam = clean[i]
        cols = [stack.gradient[i, 0], stack.gradient[i, 1], lam - stack.static,
                np.ones_like(lam)]
        jac = np.stack([np.asarray(c, np.float64).ravel() for c in cols], axis=1)
        weighted = jac / np.maximum(lam, floor).ravel()[:, None]
        step = np.linalg.lstsq(weighted.T @ jac, weighted.T @ (frames[i] - lam).ravel(),
                               rcond=None)[0]
        out[i] += step[:2]
    return out - out[0]


def _shifts(method, frames) -> np.ndarray:
    how = METHODS[method]
    if isinstance(how, tuple):
        from skimage.registration import phase_cross_correlation

        ref = frames[0]
        return np.array([phase_cross_correlation(ref, f, upsample_factor=SKIMAGE_UPSAMPLE,
                                                 normalization=how[1])[0] for f in frames])
    from ..alignment import align

    return np.asarray(align(frames, device="cpu", **how).shifts, np.float64)


def measure(kind, seed, quick=False, methods=None) -> list:
    """One row per method of the stack ``(kind, seed)``: its RMS and max error (px) and the
    RMS's split (:func:`error_split`: ``shared``, ``per_frame``), and the stack's ``oracle``
    (the RMS of :func:`oracle_shifts`; its split: ``oracle_shared``, ``oracle_per_frame``); a
    method that fails gets NaN and ``error`` says why (a failing peer is a table entry)."""
    stack = make_stack(kind, seed, quick=quick)
    best = oracle_shifts(stack)
    oracle = stack_errors(best, stack.truth)[0]
    o_shared, o_frame = error_split(best, stack.truth)
    rows = []
    for m in methods or METHODS:
        row = {"kind": kind, "seed": seed, "image": stack.image,
               "shape": list(stack.frames.shape), "method": m, "error": "", "oracle": oracle,
               "oracle_shared": o_shared, "oracle_per_frame": o_frame}
        try:
            shifts = _shifts(m, stack.frames)
            row["rms"], row["max"] = stack_errors(shifts, stack.truth)
            row["shared"], row["per_frame"] = error_split(shifts, stack.truth)
        except Exception as exc:  # noqa: BLE001 -- reported in the table
            row["rms"] = row["max"] = row["shared"] = row["per_frame"] = math.nan
            row["error"] = reason(exc)
        rows.append(row)
    return rows


def _fmt(x) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.3f}"


def report_lines(rows) -> list:
    """A Markdown table per kind (mean RMS, its min-max over seeds, mean of the max errors; its
    last row the oracle, :func:`oracle_shifts`), a table of every stack (the default and the
    oracle) and the targets for the default as yes/no lines."""
    out = []
    kinds = [k for k in KINDS if any(r["kind"] == k for r in rows)]
    for k in kinds:
        kr = [r for r in rows if r["kind"] == k]
        seeds = sorted({r["seed"] for r in kr})
        n, h, w = kr[0]["shape"]
        out += ["", f"### {k} ({n} frames of {h}x{w}; seeds {', '.join(map(str, seeds))})", "",
                "| method | RMS px (mean) | RMS min-max over seeds | max px (worst) |",
                "| --- | --- | --- | --- |"]
        for m in dict.fromkeys(r["method"] for r in kr):
            mr = [r for r in kr if r["method"] == m]
            mean, lo, hi = spread(r["rms"] for r in mr)
            worst = max((r["max"] for r in mr), default=math.nan)
            note = "; ".join(sorted({r["error"] for r in mr if r["error"]}))
            out.append(f"| {m} | {_fmt(mean)} | {_fmt(lo)}-{_fmt(hi)} | {_fmt(worst)} |"
                       + (f" {note}" if note else ""))
        per_stack = {r["seed"]: r.get("oracle", math.nan) for r in kr}
        mean, lo, hi = spread(per_stack.values())
        out.append(f"| {ORACLE} | {_fmt(mean)} | {_fmt(lo)}-{_fmt(hi)} | |")
    return out + stack_lines(rows) + [""] + target_lines(rows)


def stack_lines(rows) -> list:
    """A Markdown table of every stack: the default's RMS error and the oracle's (the floor:
    :func:`oracle_shifts`), in px, each followed by its split (:func:`error_split`: the
    offset shared by all frames / the per-frame part)."""
    d = [r for r in rows if r["method"] == DEFAULT]
    if not d:
        return []
    def cell(r, total, shared, frame):
        split = f" ({_fmt(r[shared])} / {_fmt(r[frame])})" if shared in r else ""
        return _fmt(r.get(total, math.nan)) + split

    out = ["", "### every stack: the default and the oracle (fit against the noise-free scene)",
           "", "RMS px; in brackets its split: the offset shared by all frames (mostly frame "
           "0's own error) / the per-frame part", "",
           "| kind | seed | image | default RMS px | oracle RMS px |",
           "| --- | --- | --- | --- | --- |"]
    for k in dict.fromkeys(r["kind"] for r in d):
        kr = [r for r in d if r["kind"] == k]
        mean = {c: spread(r[c] for r in kr)[0]
                for c in ("rms", "shared", "per_frame", "oracle", "oracle_shared",
                          "oracle_per_frame") if all(c in r for r in kr)}
        for r in kr + ([dict(mean, kind=k, seed="mean", image="")] if len(kr) > 1 else []):
            out.append(f"| {r['kind']} | {r['seed']} | {r['image']} | "
                       f"{cell(r, 'rms', 'shared', 'per_frame')} | "
                       f"{cell(r, 'oracle', 'oracle_shared', 'oracle_per_frame')} |")
    return out


def target_lines(rows) -> list:
    """Issue 23's targets for the default, each as a yes/no line."""
    d = [r for r in rows if r["method"] == DEFAULT]
    if not d:
        return []
    per_kind = {k: spread(r["rms"] for r in d if r["kind"] == k)[0]
                for k in KINDS if any(r["kind"] == k for r in d)}
    worst = max(per_kind, key=lambda k: per_kind[k])
    mean = spread(r["rms"] for r in d)[0]
    yes = lambda ok: "yes" if ok else "no"  # noqa: E731
    out = [f"- default <= {TARGET_EVERY} px RMS on every kind: "
           f"{yes(all(v <= TARGET_EVERY for v in per_kind.values()))} (worst: {worst} "
           f"{_fmt(per_kind[worst])})",
           f"- default mean over all stacks <= {TARGET_MEAN} px: {yes(mean <= TARGET_MEAN)} "
           f"({_fmt(mean)})"]
    if "circular" in per_kind:
        out.append(f"- default on circular <= {TARGET_CIRCULAR} px: "
                   f"{yes(per_kind['circular'] <= TARGET_CIRCULAR)} "
                   f"({_fmt(per_kind['circular'])})")
    return out


def main(quick=False, seeds=(0, 1, 2), kinds=None, echo=print, json_path=None,
         force=False) -> int:
    """Run the accuracy benchmark and print its report; returns 0, or 1 if a method failed.

    Parameters
    ----------
    quick : bool
        The tiny version (the first seed only, few small frames): a smoke run for CI.
    seeds : sequence of int
        Seeds of the stacks (each seed: another image region, drift and noise).
    kinds : sequence of str, optional
        Only these kinds (default: all of :data:`~xcorr_app.bench._accuracy_data.KINDS`).
    echo : callable
        Where the lines go.
    json_path : path, optional
        Also write the rows and the report to this JSON file (an existing file needs ``force``).

    Examples
    --------
    >>> main(quick=True, kinds=["plain"], echo=lambda s: None)  # doctest: +SKIP
    0
    """
    from ..io import prepare_outputs, write_text

    kinds = list(kinds) if kinds else list(KINDS)
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise InputError(f"unknown stack kind {bad[0]!r} (one of {', '.join(KINDS)})")
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise InputError("no seeds given")
    if quick:
        seeds = seeds[:1]
    if json_path is not None:
        prepare_outputs([json_path], force)
    header = [f"xcorr bench accuracy on {platform.machine()} ({_cores()} cores), {utc_now()}",
              f"methods on the CPU; scikit-image phase_cross_correlation upsample "
              f"{SKIMAGE_UPSAMPLE}; error = RMS over frames 1.. of the Euclidean error (px)"]
    for line in header:
        echo(line)
    rows = []
    for k in kinds:
        for s in seeds:
            rows += measure(k, s, quick=quick)
            d = next(r for r in rows[::-1] if r["method"] == DEFAULT)
            echo(f"  {k} seed {s} ({d['image']}): default RMS {_fmt(d['rms'])} px, oracle "
                 f"{_fmt(d['oracle'])}")
    report = report_lines(rows)
    for line in report:
        echo(line)
    if json_path is not None:
        write_text(json_path, json.dumps({"header": header, "rows": rows, "report": report},
                                         indent=1))
    return 1 if any(r["error"] for r in rows) else 0


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
