"""Template refinement (``reference="refined[:ITER]"``) and the detection of wrap-around
(periodic) frames (``boundary="auto"``).

A single frame is a noisy reference: every frame's shift inherits its noise, mostly as one
offset shared by all frames (at 25 photons per pixel most of the error of the first-frame
reference).  As NoRMCorre and suite2p do, :func:`~._run.measure_passes` aligns the stack against the
first frame, averages the frames measured with a distinct peak, shifted by their measured
subpixel shifts, into a template, and measures every frame again against that template (``ITER`` template passes,
1 or 2, so 2 or 3 measuring passes in all):

- the template is accumulated chunk by chunk inside the streaming measuring pass
  (:class:`TemplateAccumulator`, the ``on_chunk`` hook of
  :func:`~xcorr_app.alignment.rigid._measure.measure_frames`), on the device that measures: the
  stack is read once per measuring pass, never once more just for the template;
- which frames: every frame measured with a distinct peak: frames that could not be
  measured (constant, NaN or Inf pixels), whose peak lies on the border of the search, or
  whose confidence (peak over second peak) is below ``min_confidence`` when one is given, are
  left out.  A rule of each frame alone, so that the template does not depend on the
  chunking (a per-chunk "better half by confidence" did, and was no better: on the low-light
  stacks of ``xcorr bench accuracy`` all frames gave 0.19 px RMS against 0.22 for the better
  half);
- how: each frame is shifted by its measured shift with the bilinear warp of
  :func:`~xcorr_app.alignment.warp._warp.shift_frames` (as ``apply_shifts`` does) and summed with its
  coverage (the warp of a frame of ones; :func:`~xcorr_app.alignment.warp._warp.add_shifted`, on
  the GPU one kernel a chunk), so the template is in frame 0's coordinates; pixels
  no kept frame covers (at the edges, where all frames drifted away) take the first frame's
  value;
- the convention: the template has an offset of its own (the noise of the first pass), so the
  shifts of the last pass are reported relative to frame 0's (frame 0's shift is exactly 0,
  as with ``reference="first"``), and so are the FFT reference's.

The cost is one more measuring pass per ``ITER`` (the warp and sum of the kept frames is small
beside it).

Wrap-around frames (circular shifts of one image: periodic test data) are told apart from
frames cropped from a larger scene after the first pass by :func:`periodic_frames`: the strips
a shift wrapped around match the reference's opposite edge only if the content is periodic.
"""

from __future__ import annotations

import functools
import statistics

import numpy as np

from ... import backend
from ...streaming import host_copies
from ...correlate import irfftn_unnormalized
from ...registration import (DEFAULT_UPSAMPLE, fft_shifts, phase_ramps,
                             wrapped_correlations)
from ._lk_decision import noisy_stack, noisy_stack_on_gpu
from ._refine_lk import LucasKanade
from ..rigid import COLUMN, scaled_by
from ..rigid import prepare as rigid_prepare
from ..warp import add_shifted

__all__ = ["TemplateAccumulator", "TemplateSums", "LucasKanadeFit", "template_of", "kept_rows",
           "periodic_frames", "relative_to_first", "kept_from_first", "decide_lucas_kanade", "lucas_kanade_choice"]

#: ``boundary="auto"``: frames tested for wrap-around, the least shift (px, on either axis)
#: a tested frame needs, and the ratio of the wrapped strip's correlation to the overlap's
#: above which the content is periodic (and the overlap's least correlation to trust it)
PERIODIC_FRAMES = 8
PERIODIC_MIN_SHIFT = 2
PERIODIC_RATIO = 0.75
PERIODIC_MIN_CORRELATION = 0.2


class TemplateAccumulator:
    """The ``on_chunk`` hook of a measuring pass that sums every frame measured with a distinct
    peak (confidence at least ``min_confidence`` when given), shifted by its measured shift
    (bilinear; ``circular``: moved circularly by its Fourier phase, for frames that wrap
    around), into a template on ``xp``'s device.

    Examples
    --------
    >>> from xcorr_app.alignment.rigid import COLUMNS
    >>> acc = TemplateAccumulator(np, (4, 5))
    >>> block = np.zeros((3, len(COLUMNS))); block[:, COLUMN["finite"]] = 1
    >>> block[2, COLUMN["border"]] = 1  # no distinct peak: left out
    >>> acc(0, np.stack([np.ones((4, 5)), 3 * np.ones((4, 5)), 9 * np.ones((4, 5))]), block)
    >>> float(acc.template(np.zeros((4, 5)))[0, 0])
    2.0
    """

    def __init__(self, xp, frame_shape, min_confidence=None, circular=False, scale=0):
        self.xp = xp
        self.min_confidence = min_confidence
        self.circular = circular  # wrap-around frames: moved circularly (add_shifted)
        self.scale = scale  # every frame times 2**scale (alignment.rigid.stack_exponent)
        self.total = xp.zeros(frame_shape, xp.float64)
        self.coverage = xp.zeros(frame_shape, xp.float64)
        self._done = None  # GPU: the event after the last chunk's sums

    def __call__(self, first, frames, block, filtered=None):
        """Add a chunk: ``frames`` as read and its result ``block`` (both on ``xp``'s device).
        Which rows go in (:func:`kept_rows`) is judged on the host (on the GPU the block goes
        there right after anyway); their frames are warped and summed by
        :func:`~._warp.add_shifted` (on the GPU one kernel).  On the GPU the chunks come on
        two alternating CUDA streams: each chunk's sums wait for the previous chunk's (an
        event), so that the two streams never add to the template at once."""
        xp = self.xp
        if self._done is not None:
            xp.cuda.get_current_stream().wait_event(self._done)
        c = COLUMN
        block = backend.to_numpy(block)
        keep = np.flatnonzero(kept_rows(block, np, self.min_confidence))
        add_shifted(self.total, self.coverage, scaled_by(frames, self.scale, xp),
                    block[keep, c["dy"]:c["dx"] + 1], keep, self.circular)
        if xp is not np:
            self._done = xp.cuda.get_current_stream().record()

    def add_sums(self, total, coverage):
        """Add sums made elsewhere (the patch pass's warped frames, on the chunk's stream),
        after the previous chunk's, as :meth:`__call__` adds its own."""
        xp = self.xp
        if self._done is not None:
            xp.cuda.get_current_stream().wait_event(self._done)
        self.total += total
        self.coverage += coverage
        if xp is not np:
            self._done = xp.cuda.get_current_stream().record()

    def sums(self):
        """``(total, coverage)`` once the last chunk's sums are in."""
        if self._done is not None:
            self._done.synchronize()
        return self.total, self.coverage

    def template(self, fallback):
        """The template of the sums so far (:func:`template_of`)."""
        return template_of(self.xp, *self.sums(), fallback)


def template_of(xp, total, coverage, fallback):
    """The template (float32, frame 0's coordinates) of a template pass's sums: the weighted
    mean of the kept frames, and ``fallback`` (the first frame) where less than half a frame
    covers."""
    covered = xp.greater_equal(coverage, 0.5)  # (a function, not ``>=``: filters.gradient)
    mean = total / xp.where(covered, coverage, 1.0)
    return xp.where(covered, mean, xp.asarray(fallback, xp.float64)).astype(xp.float32)


class TemplateSums:
    """The hook of a template pass, as a measuring range makes it on its device: each range
    sums its kept frames (:class:`TemplateAccumulator`, moved circularly with ``circular``);
    the pipeline adds the ranges' sums up in frame order.  Plain values, so it travels to
    other processes."""

    def __init__(self, min_confidence=None, circular=False, scale=0):
        self.min_confidence = min_confidence
        self.circular = circular
        self.scale = scale

    def make(self, xp, frame_shape, start):
        return TemplateAccumulator(xp, frame_shape, self.min_confidence, self.circular,
                                   self.scale)

    @staticmethod
    def result(hook):
        return hook.sums()


class LucasKanadeFit:
    """The hook of the last pass with ``lucas_kanade`` on: every range refines its frames'
    shifts against the template (:class:`~._refine_lk.LucasKanade`) from the last template
    pass's sums ``total``, ``coverage``, its ``template`` and ``built`` (N, 2): each frame's
    shift in that pass, NaN for frames left out of it; ``scale``: the factor of the frames in
    those sums (:func:`~xcorr_app.alignment.rigid.stack_exponent`: times ``2**scale``)."""

    def __init__(self, total, coverage, template, built, scale=0):
        self.total, self.coverage, self.template = total, coverage, template
        self.built = np.asarray(built, np.float64)
        self.scale = scale

    def make(self, xp, frame_shape, start):
        return LucasKanade(xp, xp.asarray(self.total), xp.asarray(self.coverage),
                           xp.asarray(self.template), self.built[start:], scale=self.scale)

    @staticmethod
    def result(hook):
        return None


def kept_rows(block, xp, min_confidence=None):
    """Which rows of a result block go into the template: measured (finite, not constant),
    with a distinct peak (not on the border), finite shifts, and a confidence of at least
    ``min_confidence`` when given."""
    c = COLUMN
    keep = (block[:, c["finite"]] == 1) & (block[:, c["constant"]] == 0) \
        & (block[:, c["border"]] == 0) & xp.isfinite(block[:, c["dy"]:c["dx"] + 1]).all(axis=1)
    if min_confidence is not None:
        keep &= block[:, c["confidence"]] >= min_confidence
    return keep


def relative_to_first(table):
    """``table`` with every shift made relative to frame 0's (the measured ones and the FFT
    reference's, its integer peaks by frame 0's integer peak), so that frame 0's is 0."""
    c = COLUMN
    out = table.copy()
    for a, b in (("dy", "dx"), ("fft_dy", "fft_dx"), ("fft_iy", "fft_ix")):
        cols = slice(c[a], c[b] + 1)
        if np.isfinite(table[0, cols]).all():
            out[:, cols] = table[:, cols] - table[0, cols]
    return out


#: a template pass that moves a frame this far (px) from its first pass's shift, with a weaker
#: peak than that pass's, is not refining it (:func:`kept_from_first`; docs/performance.md)
KEPT_FROM_FIRST_PX = 2.0


def kept_from_first(table, first):
    """``(table, n)``: the last template pass's ``table`` made relative to frame 0
    (:func:`relative_to_first`), with the rows of ``n`` frames replaced by their first pass's
    (``first``, against the first frame): those whose peak lay on the search border against
    the template but inside it against the first frame, and those the template moved more than
    :data:`KEPT_FROM_FIRST_PX` from their first pass's shift with a weaker peak (a lower
    confidence) than that pass saw.  Both tables as measured (a template is made in frame
    0's place), so frame 0's own jump is seen: where frame 0's row is one, every shift hangs
    on it, and the first pass's table is kept whole.  Why: a template pass refines; a frame
    that found its drift against frame 0 and jumps away from it against the template met the
    template's artefacts (a stack bleached 20-fold: 45-60 px off against it, 0.2 px against
    frame 0).

    >>> t = np.zeros((3, len(COLUMN))); f = t.copy(); f[:, COLUMN["dy"]] = [0, 1, 2]
    >>> t[:, COLUMN["dy"]] = [0, 1, 60]; t[2, COLUMN["border"]] = 1
    >>> out, n = kept_from_first(t, f); out[:, COLUMN["dy"]].tolist(), n
    ([0.0, 1.0, 2.0], 1)
    """
    c = COLUMN
    moved = np.hypot(table[:, c["dy"]] - first[:, c["dy"]], table[:, c["dx"]] - first[:, c["dx"]])
    with np.errstate(invalid="ignore"):
        jumped = (moved > KEPT_FROM_FIRST_PX) & (table[:, c["confidence"]] < first[:, c["confidence"]])
    swap = (((table[:, c["border"]] > 0) & ~(first[:, c["border"]] > 0)) | jumped) \
        & np.isfinite(first[:, c["dy"]])
    if swap.any() and swap[0]:
        return relative_to_first(first), int(swap.sum())
    out = relative_to_first(table)
    if swap.any():
        out[swap] = relative_to_first(first)[swap]
    return out, int(swap.sum())


def periodic_frames(opts, src, xp, table, reference) -> bool:
    """Whether the frames of ``src`` are circular shifts of one another (wrap-around content),
    from a first pass's ``table`` against ``reference`` (the prepared ``(frame, raw)``).

    Up to :data:`PERIODIC_FRAMES` frames shifted by at least :data:`PERIODIC_MIN_SHIFT` px are
    read again (a few frames, whatever the stack's length) and compared, unfiltered, with the
    raw reference moved circularly by their shift (the fraction of a pixel by its Fourier
    phase: :func:`fractional_references`): over the overlap, and over the strips that wrapped
    around.  Each frame at the shift of the two whose overlap matches better: the linear
    pass's, or measured again circularly (phase correlation upsampled 20 times: the linear
    pass's can be 1.4 px off on wrap-around frames, whose wrapped edges pull its peak; a
    cropped frame's circular peak can lie on the cross of the FFT's seams).
    Frames cropped from a larger scene bring new content into those strips (it does not match
    the reference's opposite edge); wrap-around frames bring the opposite edge itself.
    Periodic when the median over the tested frames of the strips' correlation is at least
    :data:`PERIODIC_RATIO` of the overlap's (which must reach
    :data:`PERIODIC_MIN_CORRELATION`).  The strips lie at the seam of the wrap, where the
    prefilter's border and a whole-pixel move's half-pixel error hurt most: compared that way,
    circular stacks of the accuracy bench fell to 0.58 and cropped ones reached 0.78.
    """
    c = COLUMN
    shifts = table[:, c["dy"]:c["dx"] + 1]
    ok = np.isfinite(shifts).all(axis=1) & (table[:, c["border"]] == 0)
    big = np.abs(np.round(np.where(ok[:, None], shifts, 0.0))).max(axis=1)
    order = [int(i) for i in np.argsort(-big, kind="stable") if big[i] >= PERIODIC_MIN_SHIFT]
    ref = reference[1]
    order = order[:PERIODIC_FRAMES]
    if not order:
        return False
    # the frames read and prepared together, their flags fetched once (one by one, each
    # preparation's launches and waits added up in a short GPU run)
    # (not filtered: the test reads the frames as they came; the GPU's preparer, whose
    # kernels a run has built, makes them; the CPU leaves the filter out)
    prepare = opts.preparer(xp, src.frame_shape) if xp is not np else \
        functools.partial(rigid_prepare, xp=np)
    frames = prepare(backend.stack_frames([src.read(i, i + 1)[0] for i in order], xp))
    on_gpu = xp is not np and frames.raw.dtype == ref.dtype == np.float32
    # each tested frame compared at two shifts: the linear pass's, and measured again
    # circularly (phase correlation, upsampled): a wrap-around frame's linear shift can be
    # 1.4 px off (its wrapped edges pull the peak), and its strips then fail to match; a
    # cropped frame's circular peak can lie on the seams' cross, a pixel or more off.  The
    # shift whose overlap matches better is the frame's (both hypotheses agree there)
    circular = np.asarray(backend.to_numpy(fft_shifts(ref, frames.raw, upsample_factor=DEFAULT_UPSAMPLE,
                                                      normalization="phase")[0]), np.float64)
    pairs = [_wrap_sums(frames.raw, ref, s, xp, on_gpu) for s in (shifts[order], circular)]
    # (fetched with the sums, waited for once; combined on the host: CuPy's & and ~ compile at
    # first use)
    copied = host_copies(pairs + [frames.finite, frames.constant])
    pairs = [np.asarray(p, np.float64) for p in copied[:2]]
    usable = copied[2] & ~copied[3]
    best = np.where((pairs[1][:, :1] > pairs[0][:, :1]), pairs[1], pairs[0])
    ratios = [strips / inside for (inside, strips), ok in zip(best, usable)
              if ok and inside >= PERIODIC_MIN_CORRELATION]
    # (statistics, not np.median: that imports numpy.ma, a cost in a one-shot process)
    return bool(ratios) and float(statistics.median(ratios)) >= PERIODIC_RATIO


def _wrap_sums(frames, ref, shifts, xp, on_gpu):
    """``(F, 2)``: each frame's correlation with ``ref`` moved circularly by its row of
    ``shifts`` (the fraction of a pixel by its Fourier phase), over the overlap and over the
    strips that wrapped around (NumPy; ``on_gpu``: a CuPy array, not waited for)."""
    h, w = frames.shape[1:]
    whole = np.round(shifts)
    if on_gpu:  # every frame's sums in 4 launches (a frame at a time: 32 launches and waits,
        # a gap of the GPU in a GPU-resident run)
        return wrapped_correlations(frames, fractional_references(ref, shifts - whole, xp),
                                    whole)
    # (the whole shift by the Fourier phase too: no rolled copy; frame k holds ref[y + iy +
    # fy, ...]) the overlap is a rectangle and the strips the rest of the frame, so each is
    # summed over views, the strips as the frame's sums less the overlap's (no masks)
    moved = fractional_references(ref, shifts, xp)
    out = np.zeros((len(frames), 2))
    for k, (iy, ix) in enumerate(whole.astype(int)):
        a = np.asarray(frames[k], np.float64)
        a = a - a.mean()  # (about the means: the sums of squares keep their digits)
        b = moved[k] - moved[k].mean()
        inside = tuple(slice(min(n, max(0, -i)), max(0, min(n, n - i)))  # (empty past it)
                       for i, n in ((iy, h), (ix, w)))
        frame_sums, overlap = _moments(a, b), _moments(a[inside], b[inside])
        out[k] = _correlation(overlap), _correlation(frame_sums - overlap)
    return out


def fractional_references(ref, fractions, xp):
    """``ref`` (H, W) moved circularly by each row ``(fy, fx)`` of ``fractions`` (F, 2), a
    fraction of a pixel, by its Fourier phase: ``(F, H, W)``, where ``[k][y, x]`` is ``ref`` at
    ``(y + fy, x + fx)`` (float64 on the CPU, float32 on the GPU: cuFFT and
    :func:`~xcorr_app.registration.phase_ramps`).

    >>> import numpy as np
    >>> ref = np.cos(2 * np.pi * np.arange(8) / 8)[None, :] * np.ones((4, 1))
    >>> moved = fractional_references(ref, np.array([[0.0, 0.5]]), np)[0]
    >>> bool(np.allclose(moved[0], np.cos(2 * np.pi * (np.arange(8) + 0.5) / 8)))
    True
    """
    h, w = ref.shape
    fractions = np.asarray(fractions, np.float64).reshape(-1, 2)
    if xp is not np:
        spec = xp.fft.rfft2(xp.asarray(ref, xp.float32))
        # (the inverse's 1/n in the ramps: cupy.fft.irfft2's copy and division compiled two
        # kernels at first use)
        return irfftn_unnormalized(phase_ramps(spec, w, fractions, 1.0 / (h * w)), (h, w))
    ry = np.exp(2j * np.pi * np.fft.fftfreq(h)[None, :] * fractions[:, :1])
    rx = np.exp(2j * np.pi * np.fft.rfftfreq(w)[None, :] * fractions[:, 1:])
    if h % 2 == 0:  # the Nyquist frequency's own cosine: the spectrum stays a real image's
        ry[:, h // 2] = np.cos(np.pi * fractions[:, 0])
    if w % 2 == 0:
        rx[:, w // 2] = np.cos(np.pi * fractions[:, 1])
    spec = np.fft.rfft2(np.asarray(ref, np.float64))
    return np.fft.irfft2(spec[None] * ry[:, :, None] * rx[:, None, :], s=(h, w))


def _moments(a, b):
    """``(k, sum a, sum b, sum a a, sum b b, sum a b)`` of the float64 images ``a`` and ``b``."""
    return np.array([a.size, a.sum(), b.sum(), np.einsum("ij,ij->", a, a),
                     np.einsum("ij,ij->", b, b), np.einsum("ij,ij->", a, b)], np.float64)


def _correlation(moments) -> float:
    """The zero-normalized correlation of two images from their :func:`_moments` over a
    region (0 where it has fewer than 2 pixels or either side is flat)."""
    k, sa, sb, saa, sbb, sab = moments
    if k < 2:
        return 0.0
    va, vb = saa - sa * sa / k, sbb - sb * sb / k
    den = np.sqrt(va * vb) if va > 0 and vb > 0 else 0.0
    return float((sab - sa * sb / k) / den) if den > 0 else 0.0


def decide_lucas_kanade(opts, src, xp, reference_fit=True):
    """``(opts, note)``: ``opts`` with ``lucas_kanade="auto"`` decided for the open source
    ``src`` (:func:`lucas_kanade_choice` of a few frames judged on ``xp``'s device:
    :mod:`~xcorr_app.alignment.refine._lk_decision`; off where neither fit can run), and a note
    when auto turned the template's fit on.  ``reference_fit``: whether the fit against the
    reference may be chosen (not where a pattern fixed on the sensor was removed: what is left
    of it does not move with the scene).  Not chosen with ``patches``: the patch pass measures
    every patch again from the frame's shift (on the bench's 40 piecewise stacks the fit moved
    the field's error either way, 10 better, 9 worse, the median as it was), so the time is
    better spent there."""
    if opts.lucas_kanade != "auto":
        return opts, None
    template_fit = opts.lk_possible
    reference_fit = reference_fit and opts.reference_fit_possible and opts.patches is None
    if not (template_fit or reference_fit):
        return opts._decided(lucas_kanade="off"), None
    judged = noisy_stack(src) if xp is np else noisy_stack_on_gpu(src).result()
    return lucas_kanade_choice(opts, *judged, template_fit=template_fit,
                               reference_fit=reference_fit)


#: ``lucas_kanade="auto"`` stays off where the sampled frames' brightness changes by more than
#: this (:func:`~xcorr_app.alignment.rigid.brightness_change`): a template of bright and dim
#: frames misleads the fit, and the reference's fit is no better there (the bench's figures:
#: docs/performance.md, "Hard stacks")
LK_MAX_BRIGHTNESS_CHANGE = 0.3


def lucas_kanade_choice(opts, noisy, precision, change=0.0, template_fit=True,
                        reference_fit=False):
    """``(opts, note)`` of :func:`decide_lucas_kanade` from the judgement of the frames,
    ``(noisy, precision, change)`` (:func:`~xcorr_app.alignment.refine._lk_decision.noisy_stack`):
    off where the brightness changes by more than :data:`LK_MAX_BRIGHTNESS_CHANGE`; else
    ``on`` (the template's fit) for noisy frames where ``template_fit`` may run, ``reference``
    for the others where ``reference_fit`` may, else off."""
    if change > LK_MAX_BRIGHTNESS_CHANGE:
        return opts._decided(lucas_kanade="off"), None if not noisy else (
            f"lucas_kanade auto: off (noisy frames, but their brightness changes by "
            f"{100 * change:.0f}% over the stack: a template of bright and dim frames "
            "misleads the fit)")
    if not noisy:
        return opts._decided(lucas_kanade="reference" if reference_fit else "off"), None
    if not template_fit:
        return opts._decided(lucas_kanade="off"), None
    return opts._decided(lucas_kanade="on"), (
        f"lucas_kanade auto: on (noisy frames: their noise allows about "
        f"{precision:.2f} px); refined template, then a Lucas-Kanade fit of every "
        "frame against it, leaving the frame out and smoothed")
