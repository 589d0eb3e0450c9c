"""``xcorr bench accuracy``: the error of xcorr's alignment (the default, and options) and of
scikit-image's ``phase_cross_correlation`` against the exact drift of hard stacks
(:mod:`xcorr_app.bench._accuracy_data`), every kind drawn from at least four real images at
two frame sizes and five seeds (:func:`~xcorr_app.bench._accuracy_data.cases`), on the CPU.

The error of a stack is the RMS over its frames (frame 0, the reference, left out) of the
Euclidean distance between measured and true shift, in px (``piecewise``: of the motion field
at the patch centres); its max is the largest such distance.  It splits exactly
(:func:`error_split`) into the offset that all frames share (for shifts relative to frame 0,
mostly frame 0's own error: one draw per stack) and the per-frame part.

Every stack is compared with scikit-image's better normalization on it (``none`` or
``phase``, upsample 100; on ``piecewise`` both the whole frame and then each patch,
:func:`skimage_field`): the default wins, ties (within :data:`TIE`) or loses, per stack; the
report gives each kind's median and worst, the oracle's floor (:func:`oracle_shifts`), the
Cramer-Rao bound of the stack's noise (:func:`stack_bound`: what no unbiased method can beat,
given the noise-free scene), the default's frames more than :data:`OFF_BY` px off and how many
of them it flagged, and every stack's row.  On the stacks that rotate (:data:`ROTATING`) a
frame is off where any of its corners is (the rotation the translation model leaves moves them:
:func:`corner_errors`), and the rigid-body model (:data:`RIGID_BODY`) is measured beside the
default.  The stacks come from scikit-image's sample images,
so the bench needs it.

Examples
--------
>>> stack_errors([[0, 0], [1, 1], [2, 2]], [[0, 0], [1, 1], [2, 2.5]])
(0.3536, 0.5)
>>> error_split([[0, 0], [1, 1], [2, 2]], [[0, 0], [1, 1], [2, 2.5]])
(0.25, 0.25)
>>> spread([0.25, 0.75, 0.5])
(0.5, 0.25, 0.75)
>>> verdict(0.0204, 0.0200), verdict(0.03, 0.02), verdict(0.01, 0.02)
('tie', 'loses', 'wins')
"""

from __future__ import annotations

import json
import math
import platform

import numpy as np

from ..errors import InputError
from ._accuracy_data import ALL_KINDS, PIECEWISE_GRID, cases, make_stack
from ._accuracy_volumes import (CIRCULAR, VOLUME_KINDS, VOLUME_METHODS, measure_volumes,
                                volume_cases, volume_target_lines)
from ._common import reason, utc_now

__all__ = ["METHODS", "DEFAULT", "BEFORE", "SKIMAGE", "TARGET_EVERY", "TARGET_CIRCULAR", "TIE",
           "ORACLE", "OFF_BY", "stack_errors", "error_split", "spread", "oracle_shifts",
           "cramer_rao", "stack_bound", "measure",
           "verdict", "skimage_field", "report_lines", "stack_lines", "target_lines", "main",
           "RIGID_BODY", "ROTATING", "corner_errors", "DEFAULT_GPU", "GPU_CPU_PX", "gpu_lines"]

#: the default: what ``xcorr align`` does without options
DEFAULT = "xcorr default"
#: scikit-image's two normalizations; the report compares with the better on each stack
SKIMAGE = ("skimage pcc none", "skimage pcc phase")
#: method name -> keyword arguments of :func:`xcorr_app.align` (on the CPU), or ("skimage",
#: normalization) for ``phase_cross_correlation`` with upsample :data:`SKIMAGE_UPSAMPLE`.
#: The bench measures the default and scikit-image; ``methods="all"`` adds the others: the
#: default before issue 23 (one pass against the first frame, gaussian:1, linear) and rows
#: that change one thing of it ("alone"), so each shows that option's own effect
#: (``boundary=circular`` is the circular refinement and its pass against a template of the
#: frames moved circularly; no Lucas-Kanade step); the refined rows
#: show the template alone (``lucas_kanade`` off)
BEFORE = {"reference": "first", "prefilter": "gaussian:1", "boundary": "linear",
          "lucas_kanade": "off"}
METHODS = {
    DEFAULT: {},
    SKIMAGE[0]: ("skimage", None),
    SKIMAGE[1]: ("skimage", "phase"),
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
    "xcorr model=rigid-body": {"model": "rigid-body"},
}
#: the rigid-body model's row, which the bench adds on the stacks that rotate
RIGID_BODY = "xcorr model=rigid-body"
#: the default on the GPU (``gpu=True``; not in ``methods="all"``): its shifts against the
#: CPU's default on every 2-D stack (:func:`gpu_lines`)
DEFAULT_GPU = "xcorr default on the GPU"
METHODS[DEFAULT_GPU] = {"device": "gpu"}
#: the most the GPU's shifts may differ from the CPU's (px, issue 76)
GPU_CPU_PX = 1e-3
#: every kind the bench takes: the 2-D ones, and the volumes (3-D, voxels; only when named:
#: ``--kinds volumes``, :mod:`~xcorr_app.bench._accuracy_volumes`)
BENCH_KINDS = ALL_KINDS + VOLUME_KINDS
#: the kinds whose frames rotate (their ``angle``): a frame's error is its corners'
ROTATING = ("rotation", "rotation_jitter")
#: what the bench measures unless told ``methods="all"``
COMPARED = (DEFAULT,) + SKIMAGE
#: the row of the floor in the report (:func:`oracle_shifts`)
ORACLE = "oracle (fit against the noise-free scene: the floor)"
#: targets for the default (RMS px): every kind's median; ``circular_noisy``'s worst stack
TARGET_EVERY = 0.1
TARGET_CIRCULAR = 0.05
#: the default ties with scikit-image within this fraction of scikit-image's error
TIE = 0.05
SKIMAGE_UPSAMPLE = 100
#: a frame whose shift is this far off (px, Euclidean) counts as off in the report, beside
#: how many of those the run flagged (``low_confidence`` or the quality report's flags)
OFF_BY = 0.5


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
    weighted by the Poisson variance (``clean``; the hard kinds: ``clean - offset`` plus the
    read noise's): the maximum-likelihood estimate to first order, near the Cramer-Rao bound
    (:func:`cramer_rao`; this fit also frees a gain and an offset).  Frame 0's own noise
    stays in (its fit is subtracted), which no method can remove; the circular stacks have no
    noise (0).

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
        var = lam if stack.offset is None else lam - stack.offset + stack.read_noise ** 2
        weighted = jac / np.maximum(var, floor).ravel()[:, None]
        step = np.linalg.lstsq(weighted.T @ jac, weighted.T @ (frames[i] - lam).ravel(),
                               rcond=None)[0]
        out[i] += step[:2]
    return out - out[0]


def cramer_rao(mean, gradient, read_noise=0.0) -> np.ndarray:
    """The Cramer-Rao bound of a translation, per frame: (N, 2) the least standard deviation
    (px) of any unbiased estimate of each component of the shift ``(dy, dx)``.

    For frames of Poisson photons of mean ``mean`` (N, H, W) plus gaussian read noise of
    ``read_noise`` electrons RMS, the Fisher information of the shift is
    ``I = sum over pixels of g g^T / (mean + read_noise ** 2)``, ``g`` the derivative of the
    mean with respect to the shift (``gradient``, (N, 2, H, W)): exact for Poisson alone, the
    usual gaussian approximation with read noise.  The bound is ``sqrt(diag(I^-1))``; a frame
    without information (no gradient) is bounded by infinity.

    Examples
    --------
    A gaussian spot of sigma ``s`` px and ``n`` photons: ``s / sqrt(n)`` per axis.

    >>> yy, xx = np.mgrid[:48, :48] - 23.5
    >>> spot = 1e4 * np.exp(-(yy ** 2 + xx ** 2) / 8) / (8 * np.pi)
    >>> grad = np.stack([yy, xx]) / 4 * spot
    >>> cramer_rao(spot[None], grad[None]).round(4).tolist()
    [[0.02, 0.02]]
    """
    mean = np.asarray(mean, np.float64)
    g = np.asarray(gradient, np.float64)
    var = mean + float(read_noise) ** 2
    w = np.divide(1.0, var, out=np.zeros_like(var), where=var > 0)
    info = np.einsum("nahw,nbhw->nab", g * w[:, None], g)
    det = info[:, 0, 0] * info[:, 1, 1] - info[:, 0, 1] ** 2
    ok = det > 1e-12 * np.maximum(info[:, 0, 0] * info[:, 1, 1], np.finfo(float).tiny)
    det = np.where(ok, det, 1.0)
    out = np.sqrt(np.stack([info[:, 1, 1], info[:, 0, 0]], axis=1) / det[:, None])
    return np.where(ok[:, None], out, np.inf)


def stack_bound(stack) -> tuple:
    """``(rms, per_frame)``: the Cramer-Rao bound of a stack's error as the bench measures it.

    ``per_frame`` (N,) px bounds the Euclidean error of each frame's shift relative to frame
    0: ``sqrt(var_i + var_0)``, ``var`` the sum of :func:`cramer_rao`'s two variances of a
    frame against the noise-free scene (the ``clean`` frames of
    :class:`~xcorr_app.bench._accuracy_data.AccuracyStack`, ``clean - offset`` the Poisson
    mean).  Every method reports shifts relative to frame 0, so frame 0's own noise enters
    every shift whether the method measured against frame 0 or a template: with the scene
    known, no unbiased estimate of the relative shift does better (a method that must learn
    the scene from the frames does worse).  ``rms``: over frames 1.., rounded to 1e-4, as
    :func:`stack_errors`; 0 for the noise-free ``circular`` kind, NaN without a noise-free
    scene (``piecewise``)."""
    n = len(stack.frames)
    if stack.clean is None:
        return math.nan, np.full(n, math.nan)
    if stack.kind == "circular":
        return 0.0, np.zeros(n)
    mean = np.asarray(stack.clean, np.float64)
    if stack.offset is not None:
        mean = mean - stack.offset
    var = (cramer_rao(mean, stack.gradient, stack.read_noise) ** 2).sum(axis=1)
    rel = np.sqrt(var + var[0])
    rel[0] = 0.0
    if n < 2:
        return 0.0, rel
    rms = float(np.sqrt(np.mean(rel[1:] ** 2)))
    return (round(rms, 4) if math.isfinite(rms) else math.inf), rel


def verdict(default, best) -> str:
    """``wins``, ``tie`` or ``loses``: the default's error against scikit-image's better one on
    a stack, a tie within :data:`TIE` of it (``n/a`` where either is missing)."""
    if not (math.isfinite(default) and math.isfinite(best)):
        return "n/a" if math.isnan(default) or math.isnan(best) else \
            ("loses" if not math.isfinite(default) else "wins")
    if default > best * (1 + TIE):
        return "loses"
    return "wins" if default < best * (1 - TIE) else "tie"


def skimage_field(frames, centres, size, normalization):
    """scikit-image's motion field (N, gy, gx, 2) on the patches of ``size`` around
    ``centres`` (gy, gx, 2): each frame against frame 0 as a whole first (upsample
    :data:`SKIMAGE_UPSAMPLE`), then each patch of frame 0 against the patch of the frame
    displaced by that shift rounded, the two added (as piecewise-rigid tools do)."""
    from skimage.registration import phase_cross_correlation as pcc

    ref = frames[0]
    h, w = ref.shape
    ph, pw = (int(v) for v in size)
    out = np.zeros((len(frames),) + centres.shape[:2] + (2,))
    for i, f in enumerate(frames):
        rigid = np.round(pcc(ref, f, upsample_factor=SKIMAGE_UPSAMPLE,
                             normalization=normalization)[0]).astype(int)
        for j, k in np.ndindex(centres.shape[:2]):
            y0 = int(np.clip(round(centres[j, k, 0] - (ph - 1) / 2), 0, h - ph))
            x0 = int(np.clip(round(centres[j, k, 1] - (pw - 1) / 2), 0, w - pw))
            y1 = int(np.clip(y0 - rigid[0], 0, h - ph))
            x1 = int(np.clip(x0 - rigid[1], 0, w - pw))
            s = pcc(ref[y0:y0 + ph, x0:x0 + pw], f[y1:y1 + ph, x1:x1 + pw],
                    upsample_factor=SKIMAGE_UPSAMPLE, normalization=normalization)[0]
            out[i, j, k] = s + [y0 - y1, x0 - x1]
    return out


def _measured(method, stack):
    """The method's shifts (N, 2) of ``stack``, the truth to compare them with and the frames
    xcorr flagged (``low_confidence`` or the quality report's ``worse`` / ``poor``; None for
    scikit-image and ``piecewise``); for ``piecewise`` its motion field at the patch centres
    and the true field there."""
    how = METHODS[method]
    frames = stack.frames
    if stack.kind == "piecewise":
        from ..alignment import align
        from ._align_data import truth_at

        if method not in (DEFAULT, DEFAULT_GPU) and not isinstance(how, tuple):
            raise InputError(f"{method} is not measured on piecewise stacks")
        res = align(frames, device=how.get("device", "cpu") if isinstance(how, dict) else "cpu",
                    patches=PIECEWISE_GRID)
        centres = np.asarray(res.patch_centres, np.float64)
        want = truth_at(stack.info["field_params"], centres)
        got = np.asarray(res.motion_field, np.float64) if not isinstance(how, tuple) else \
            skimage_field(frames, centres, res.settings["patches"]["size"], how[1])
        return got.reshape(len(frames), -1, 2), want.reshape(len(frames), -1, 2), None
    if isinstance(how, tuple):
        from skimage.registration import phase_cross_correlation

        ref = frames[0]
        return np.array([phase_cross_correlation(ref, f, upsample_factor=SKIMAGE_UPSAMPLE,
                                                 normalization=how[1])[0] for f in frames]), \
            stack.truth, None
    from ..alignment import align

    res = align(frames, **{"device": "cpu", **how})
    flags = np.asarray(res.low_confidence, bool)
    if res.quality is not None:
        flags = flags | np.asarray(res.quality.flagged, bool)
    got = np.asarray(res.shifts, np.float64)
    if stack.kind in ROTATING:  # (the off frames: by their corners)
        turn = np.zeros(len(got)) if res.rotation_deg is None else res.rotation_deg
        flags = (flags, corner_errors(got, turn, stack.truth, -np.asarray(stack.angle),
                                      frames.shape[1:]))
    return got, stack.truth, flags


def corner_errors(shifts, rotation_deg, truth, true_deg, frame_shape) -> np.ndarray:
    """(N,) px: the largest error over each frame's four corners of the rigid-body transform
    measured (``shifts``, ``rotation_deg``; 0 for the translation model) against the true one
    (:func:`~xcorr_app.alignment.warp.rigid_body_field`: the displacement at the corners).

    >>> corner_errors([[0.0, 0.0]], [0.0], [[0.0, 0.3]], [1.0], (101, 101)).round(2).tolist()
    [1.46]
    """
    from ..alignment.warp import rigid_body_field

    got = rigid_body_field(shifts, rotation_deg, frame_shape)[0]
    want = rigid_body_field(truth, true_deg, frame_shape)[0]
    return np.sqrt(((got - want) ** 2).sum(-1)).reshape(len(got), -1).max(axis=1)


def _off(got, want, flags) -> tuple:
    """``(off, flagged)``: how many frames (frame 0 left out) are more than :data:`OFF_BY`
    px off, and how many of those ``flags`` marks (None without flags); ``(None, None)`` for
    a motion field.  ``flags`` ``(flags, errors)``: the frames' errors are those given
    (:func:`corner_errors`), not their shifts'."""
    if got.ndim == 3:
        return None, None
    if isinstance(flags, tuple):
        flags, error = flags
    else:
        d = got[1:] - np.asarray(want, np.float64)[1:]
        error = np.concatenate([[0.0], np.hypot(d[:, 0], d[:, 1])])
    off = ~(error[1:] <= OFF_BY)  # (NaN counts as off)
    return int(off.sum()), None if flags is None else int((off & flags[1:]).sum())


def _errors(got, want):
    """:func:`stack_errors` and :func:`error_split` of shifts (N, 2) or fields (N, P, 2): a
    field's points count as frames (frame 0's left out)."""
    if got.ndim == 3:
        got = np.concatenate([np.zeros((1, 2)), got[1:].reshape(-1, 2)])
        want = np.concatenate([np.zeros((1, 2)), want[1:].reshape(-1, 2)])
    return stack_errors(got, want) + error_split(got, want)


def measure(kind, seed, quick=False, methods=None, image=None, shape=None) -> list:
    """One row per method of the stack ``(kind, seed, image, shape)``: its RMS and max error
    (px) and the RMS's split (:func:`error_split`: ``shared``, ``per_frame``), and the stack's
    ``oracle`` (the RMS of :func:`oracle_shifts`; its split: ``oracle_shared``,
    ``oracle_per_frame``; NaN for ``piecewise``), its Cramer-Rao bound ``crb``
    (:func:`stack_bound`'s RMS), and per method ``off``, the frames more than :data:`OFF_BY` px
    off, and ``off_flagged``, how many of them xcorr flagged (None for scikit-image; both None
    for ``piecewise``); a method that fails gets NaN and ``error`` says why (a failing peer is
    a table entry).  ``volumes``: :func:`~xcorr_app.bench._accuracy_volumes.measure_volumes`
    (voxels)."""
    if kind in VOLUME_KINDS:
        return measure_volumes(seed, quick, methods, image, shape, OFF_BY)
    stack = make_stack(kind, seed, quick=quick, image=image, shape=shape)
    crb = stack_bound(stack)[0]
    if stack.clean is not None:
        best = oracle_shifts(stack)
        oracle = stack_errors(best, stack.truth)[0]
        o_shared, o_frame = error_split(best, stack.truth)
    else:
        oracle = o_shared = o_frame = math.nan
    rows, measured = [], {}
    for m in methods or COMPARED:
        row = {"kind": kind, "seed": seed, "image": stack.image,
               "shape": list(stack.frames.shape), "method": m, "error": "", "oracle": oracle,
               "oracle_shared": o_shared, "oracle_per_frame": o_frame, "crb": crb,
               "off": None, "off_flagged": None}
        try:
            got, want, flags = _measured(m, stack)
            row["rms"], row["max"], row["shared"], row["per_frame"] = _errors(got, want)
            row["off"], row["off_flagged"] = _off(got, want, flags)
            measured[m] = (got, flags)
            if m == DEFAULT_GPU and DEFAULT in measured:
                row["vs_cpu"], row["flags_differ"] = _vs_cpu(measured[DEFAULT], (got, flags))
        except Exception as exc:  # noqa: BLE001 -- reported in the table
            row["rms"] = row["max"] = row["shared"] = row["per_frame"] = math.nan
            row["error"] = reason(exc)
        rows.append(row)
    return rows


def _vs_cpu(cpu, gpu) -> tuple:
    """``(px, frames)``: the largest difference between the CPU's shifts (or field) and the
    GPU's (NaN in both: none; in one: inf) and how many frames one flags and the other not."""
    a, b = (np.asarray(x[0], np.float64) for x in (cpu, gpu))
    with np.errstate(invalid="ignore"):
        d = np.where(np.isnan(a) & np.isnan(b), 0.0, np.abs(a - b))
    px = float(np.max(np.nan_to_num(d, nan=np.inf))) if d.size else 0.0
    flags = [f[0] if isinstance(f, tuple) else f for f in (cpu[1], gpu[1])]
    differ = None if flags[0] is None or flags[1] is None else \
        int(np.sum(np.asarray(flags[0], bool) != np.asarray(flags[1], bool)))
    return px, differ


def gpu_lines(rows) -> list:
    """Per kind, where the default also ran on the GPU (:data:`DEFAULT_GPU`): the largest
    difference of its shifts from the CPU's (px; median and worst over the kind's stacks), the
    frames flagged on one device and not the other, and the target line (:data:`GPU_CPU_PX`)."""
    got = [r for r in rows if r["method"] == DEFAULT_GPU and "vs_cpu" in r]
    if not got:
        return []
    out = ["", "### the default on the GPU against the CPU", "",
           "| kind | stacks | max \\|GPU - CPU\\| px (median / worst) | frames flagged on one "
           "device only |", "| --- | --- | --- | --- |"]
    for k in dict.fromkeys(r["kind"] for r in got):
        v = [r["vs_cpu"] for r in got if r["kind"] == k]
        differ = [r["flags_differ"] for r in got if r["kind"] == k
                  and r["flags_differ"] is not None]
        out.append(f"| {k} | {len(v)} | {_median(v):.1e} / {max(v):.1e} | "
                   f"{sum(differ) if differ else 'n/a'} |")
    worst = max(got, key=lambda r: r["vs_cpu"])
    out += ["", f"- the GPU's shifts within {GPU_CPU_PX:g} px of the CPU's on every stack: "
            f"{'yes' if worst['vs_cpu'] <= GPU_CPU_PX else 'no'} (worst {worst['vs_cpu']:.1e} px,"
            f" {worst['kind']} {worst['image']} {_shape(worst['shape'][1:])} seed "
            f"{worst['seed']})"]
    return out


def _fmt(x) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.3f}"


def _stack_id(r) -> tuple:
    return r["kind"], r["image"], tuple(r["shape"][1:]), r["seed"]


def comparisons(rows) -> list:
    """Per stack: ``{kind, image, shape, seed, default, skimage: {method: rms}, best, ratio,
    verdict, oracle, crb, off, off_flagged}`` (``best``: scikit-image's better error; NaN where
    it was not run; ``off``, ``off_flagged``: the default's, None where not counted)."""
    out = {}
    for r in rows:
        c = out.setdefault(_stack_id(r), {"kind": r["kind"], "image": r["image"],
                                          "shape": tuple(r["shape"][1:]), "seed": r["seed"],
                                          "default": math.nan, "skimage": {},
                                          "oracle": r.get("oracle", math.nan),
                                          "crb": r.get("crb", math.nan), "off": None,
                                          "off_flagged": None})
        if r["method"] == DEFAULT:
            c["default"] = r["rms"]
            c["off"], c["off_flagged"] = r.get("off"), r.get("off_flagged")
        elif r["method"] in SKIMAGE:
            c["skimage"][r["method"]] = r["rms"]
    for c in out.values():
        finite = [v for v in c["skimage"].values() if math.isfinite(v)]
        c["best"] = min(finite) if finite else math.nan
        c["ratio"] = c["default"] / c["best"] if c["best"] and math.isfinite(c["best"]) \
            else math.nan
        c["verdict"] = verdict(c["default"], c["best"])
    return list(out.values())


def _median(values) -> float:
    v = [x for x in values if not math.isnan(x)]
    return float(np.median(v)) if v else math.nan


def _off_cell(stacks) -> str:
    """``"OFF (FLAGGED)"``: the default's frames more than :data:`OFF_BY` px off over
    ``stacks`` (comparisons) and how many of them it flagged; ``n/a`` where not counted."""
    counted = [c for c in stacks if c.get("off") is not None]
    if not counted:
        return "n/a"
    flagged = [c["off_flagged"] for c in counted if c.get("off_flagged") is not None]
    return f"{sum(c['off'] for c in counted)} ({sum(flagged) if flagged else 'n/a'})"


def report_lines(rows) -> list:
    """The report: per kind the default's and scikit-image's median and worst RMS error over
    its stacks, the oracle's median, the count of stacks the default wins, ties or loses, the
    median Cramer-Rao bound (:func:`stack_bound`) and the default's frames more than
    :data:`OFF_BY` px off (in brackets: how many of them it flagged);
    per kind every method's median and worst (where more than the compared ones ran); every
    stack's row (:func:`stack_lines`); the targets (:func:`target_lines`)."""
    comp = comparisons(rows)
    kinds = [k for k in BENCH_KINDS if any(c["kind"] == k for c in comp)]
    out = ["", "### every kind: the default and scikit-image's better normalization",
           "", f"RMS px over each kind's stacks (median / worst); a tie: within "
           f"{TIE:.0%} of scikit-image", "",
           "| kind | stacks | xcorr default | scikit-image best | oracle (median) | default "
           f"wins / ties / loses | CRB (median) | frames > {OFF_BY} px off (flagged) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for k in kinds:
        kc = [c for c in comp if c["kind"] == k]
        d = [c["default"] for c in kc]
        b = [c["best"] for c in kc]
        count = {v: sum(c["verdict"] == v for c in kc) for v in ("wins", "tie", "loses")}
        out.append(f"| {k} | {len(kc)} | {_fmt(_median(d))} / {_fmt(max(d))} | "
                   f"{_fmt(_median(b))} / {_fmt(max(b))} | {_fmt(_median(c['oracle'] for c in kc))}"
                   f" | {count['wins']} / {count['tie']} / {count['loses']} | "
                   f"{_fmt(_median(c.get('crb', math.nan) for c in kc))} | {_off_cell(kc)} |")
    methods = list(dict.fromkeys(r["method"] for r in rows))
    if set(methods) - set(COMPARED):
        out += ["", "### every method (RMS px: median / worst over the kind's stacks)", "",
                "| method | " + " | ".join(kinds) + " |", "| --- |" + " --- |" * len(kinds)]
        for m in methods:
            cells = []
            for k in kinds:
                mr = [r for r in rows if r["method"] == m and r["kind"] == k]
                v = [r["rms"] for r in mr]
                cells.append(f"{_fmt(_median(v))} / {_fmt(max(v))}" if v else "")
            out.append(f"| {m} | " + " | ".join(cells) + " |")
    notes = sorted({f"{r['method']}: {r['error']}" for r in rows if r["error"]})
    out += [""] + [f"- failed: {n}" for n in notes] if notes else []
    return out + stack_lines(rows) + gpu_lines(rows) + [""] + target_lines(rows)


def stack_lines(rows) -> list:
    """A Markdown table of every stack: the default's RMS error (in brackets its split: the
    offset shared by all frames / the per-frame part), scikit-image's with each
    normalization, the default over the better one and the verdict, the oracle's RMS, the
    Cramer-Rao bound (:func:`stack_bound`) and the default's frames more than :data:`OFF_BY`
    px off (flagged)."""
    comp = comparisons(rows)
    if not comp:
        return []
    split = {_stack_id(r): r for r in rows if r["method"] == DEFAULT}
    out = ["", "### every stack", "",
           "RMS px; the default's split in brackets: the offset shared by all frames (mostly "
           "frame 0's own error) / the per-frame part", "",
           "| kind | image | shape | seed | default | skimage none | skimage phase | ratio | "
           f"verdict | oracle | CRB | > {OFF_BY} px off (flagged) |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in comp:
        r = split.get((c["kind"], c["image"], c["shape"], c["seed"]), {})
        parts = f" ({_fmt(r['shared'])} / {_fmt(r['per_frame'])})" if "shared" in r else ""
        sk = [c["skimage"].get(m, math.nan) for m in SKIMAGE]
        out.append(f"| {c['kind']} | {c['image']} | {_shape(c['shape'])} | "
                   f"{c['seed']} | {_fmt(c['default'])}{parts} | {_fmt(sk[0])} | {_fmt(sk[1])} "
                   f"| {_fmt(c['ratio'])} | {c['verdict']} | {_fmt(c['oracle'])} | "
                   f"{_fmt(c.get('crb', math.nan))} | {_off_cell([c])} |")
    return out


def target_lines(rows) -> list:
    """The targets for the default, each as a yes/no line: every rigid kind's median at most
    :data:`TARGET_EVERY` (``piecewise`` is a motion field's error, reported apart), every
    ``circular_noisy`` stack at most :data:`TARGET_CIRCULAR` (the worst with its oracle: the
    floor of that stack), and no stack lost to scikit-image (those lost are named)."""
    comp = comparisons(rows)
    if not comp:
        return []
    yes = lambda ok: "yes" if ok else "no"  # noqa: E731
    per_kind = {k: _median(c["default"] for c in comp if c["kind"] == k)
                for k in ALL_KINDS if k != "piecewise" and any(c["kind"] == k for c in comp)}
    out = []
    if per_kind:
        worst = max(per_kind, key=lambda k: per_kind[k])
        out.append(f"- default median <= {TARGET_EVERY} px on every rigid kind: "
                   f"{yes(all(v <= TARGET_EVERY for v in per_kind.values()))} (worst: {worst} "
                   f"{_fmt(per_kind[worst])})")
    circ = [c for c in comp if c["kind"] == "circular_noisy"]
    if circ:
        w = max(circ, key=lambda c: c["default"])
        within = sum(c["default"] <= TARGET_CIRCULAR for c in circ)
        out.append(f"- default on every circular_noisy stack <= {TARGET_CIRCULAR} px: "
                   f"{yes(within == len(circ))} ({within} of {len(circ)}; worst "
                   f"{_fmt(w['default'])}, {w['image']} {_shape(w['shape'])} seed "
                   f"{w['seed']}, whose oracle is {_fmt(w['oracle'])})")
    lost = [c for c in comp if c["verdict"] == "loses"]
    compared = [c for c in comp if c["verdict"] != "n/a"]
    if compared:
        out.append(f"- default at least as accurate as scikit-image's better normalization "
                   f"(within {TIE:.0%}) on every stack: {yes(not lost)} ({len(compared) - len(lost)}"
                   f" of {len(compared)})")
        out += [f"  - loses: {c['kind']} {c['image']} {_shape(c['shape'])} seed "
                f"{c['seed']}: {_fmt(c['default'])} against {_fmt(c['best'])}" for c in lost]
    return out + volume_target_lines(comp)


def _shape(shape) -> str:
    """A frame's or volume's shape as ``HxW`` / ``ZxYxX``."""
    return "x".join(str(int(v)) for v in shape)


def main(quick=False, seeds=(0, 1, 2, 3, 4), kinds=None, echo=print, json_path=None,
         force=False, methods=None, gpu=False) -> int:
    """Run the accuracy benchmark and print its report; returns 0, or 1 if a method failed.

    Parameters
    ----------
    quick : bool
        The tiny version (one stack of every kind: its first image, few small frames, the first
        seed): a smoke run for CI.
    seeds : sequence of int
        Seeds of the stacks (each seed: another image region, drift and noise).
    kinds : sequence of str, optional
        Only these kinds (default: all of :data:`~xcorr_app.bench._accuracy_data.ALL_KINDS`;
        ``volumes``, of :data:`BENCH_KINDS`, only when named).
    echo : callable
        Where the lines go.
    json_path : path, optional
        Also write the rows and the report to this JSON file (an existing file needs ``force``).
    methods : sequence of str or "all", optional
        Which of :data:`METHODS` (default: the default and scikit-image's two; ``"all"``: all
        but :data:`DEFAULT_GPU`).
    gpu : bool
        Also the default on the GPU (:data:`DEFAULT_GPU`) on the 2-D kinds, its shifts against
        the CPU's (:func:`gpu_lines`); without a usable GPU an :class:`InputError`.

    Examples
    --------
    >>> main(quick=True, kinds=["plain"], echo=lambda s: None)  # doctest: +SKIP
    0
    """
    from ..io import prepare_outputs, write_text

    kinds = list(kinds) if kinds else list(ALL_KINDS)
    bad = [k for k in kinds if k not in BENCH_KINDS]
    if bad:
        raise InputError(f"unknown stack kind {bad[0]!r} (one of {', '.join(BENCH_KINDS)})")
    chosen = methods is not None
    methods = [m for m in METHODS if m != DEFAULT_GPU] if methods == "all" \
        else list(methods or COMPARED)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise InputError(f"unknown method {unknown[0]!r} (one of {', '.join(METHODS)})")
    if gpu:
        from .. import backend

        if not backend.gpu_available():
            raise InputError("the default on the GPU needs a usable GPU (xcorr info says why)")
        methods += [m for m in (DEFAULT, DEFAULT_GPU) if m not in methods]
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise InputError("no seeds given")
    try:
        import skimage  # noqa: F401 -- its images are the stacks, its registration the peer
    except ImportError:
        raise InputError("xcorr bench accuracy draws its stacks from scikit-image's sample "
                         "images and compares with its phase_cross_correlation: install "
                         "scikit-image (pip install scikit-image)") from None
    if json_path is not None:
        prepare_outputs([json_path], force)
    header = [f"xcorr bench accuracy on {platform.machine()} ({_cores()} cores), {utc_now()}",
              f"methods on the CPU{' (and the default on the GPU)' if gpu else ''}; "
              f"scikit-image phase_cross_correlation upsample "
              f"{SKIMAGE_UPSAMPLE}; error = RMS over frames 1.. of the Euclidean error (px)"]
    for line in header:
        echo(line)
    rows = []
    for k in kinds:
        # (the stacks that rotate: the rigid-body model beside the default, unless told)
        these = methods + [RIGID_BODY] if k in ROTATING and not chosen \
            and RIGID_BODY not in methods else methods
        if k in VOLUME_KINDS:  # (the 3-D path's own methods, and the circular one before it)
            these = [m for m in methods if m in VOLUME_METHODS] + [CIRCULAR]
        for image, shape, s in (volume_cases(seeds, quick) if k in VOLUME_KINDS
                                else cases(k, seeds, quick)):
            added = measure(k, s, quick=quick, methods=these, image=image,
                            shape=None if quick else shape)
            rows += added
            stack = {r["method"]: r for r in added}  # (this stack's rows by method)
            d, b, g = (stack.get(m) for m in (DEFAULT, RIGID_BODY, DEFAULT_GPU))
            if d is not None:
                off = "" if d.get("off") is None else f" ({d['off']} frames off" + (
                    ")" if d.get("off_flagged") is None else
                    f", {d['off_flagged']} of them flagged)")
                beside = "" if b is None else \
                    f"; rigid-body RMS {_fmt(b['rms'])} px, {b['off']} frames off"
                if g is not None and "vs_cpu" in g:
                    beside += f"; GPU - CPU {g['vs_cpu']:.1e} px"
                echo(f"  {k} {image} {_shape(shape)} seed {s}: default RMS "
                     f"{_fmt(d['rms'])} px{off}, oracle {_fmt(d['oracle'])}, CRB "
                     f"{_fmt(d.get('crb', math.nan))}{beside}")
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
