"""Align a stack of frames to a reference: the main job of xcorr.

The pipeline for each chunk of frames: convert to float32 on the compute device, subtract each
frame's mean, correlate every frame with the reference in one call (form ``one_to_many``, or
``n_to_mn`` for ``reference="previous"``), take the peak and refine it to subpixel precision,
and measure the same frames with the FFT reference (:func:`xcorr_app.fft_register.fft_shifts`,
phase correlation) to report agreement.

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> rng = np.random.default_rng(0)
>>> base = ndi.gaussian_filter(rng.random((64, 80)), 3)
>>> stack = np.stack([base, np.roll(base, (2, -3), axis=(0, 1))])
>>> res = align(stack, max_shift=8, device="cpu")
>>> np.round(res.shifts).tolist()
[[0.0, 0.0], [-2.0, 3.0]]
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from . import backend
from .correlate import cross_correlate
from .errors import InputError, XcorrError
from .fft_register import fft_shifts, refine_upsampled
from .normalize import zncc
from .peaks import find_shifts
from .shifts import normalize_max_shift, shift_origin

SUBPIXEL = ("gaussian", "parabolic", "gaussian3", "parabolic3", "upsample", "none")
NORMALIZATIONS = ("zncc", "none")
#: upsampling of the FFT reference measurement (resolution 1/20 px)
FFT_REFERENCE_UPSAMPLE = 20


@dataclasses.dataclass
class AlignResult:
    """What :func:`align` measured.

    Attributes
    ----------
    shifts : (N, 2) float64
        ``(dy, dx)`` to apply to each frame to align it with the reference (NaN where a frame is
        constant and no shift can be measured).
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
    """

    shifts: np.ndarray
    peak: np.ndarray
    confidence: np.ndarray
    fft_shifts: np.ndarray
    agree: np.ndarray
    sources: list
    settings: dict

    @property
    def n_frames(self) -> int:
        return len(self.shifts)

    @property
    def constant_frames(self) -> np.ndarray:
        return np.flatnonzero(np.isnan(self.shifts).any(axis=1))

    def summary(self) -> dict:
        """Agreement rate and RMS difference to the FFT reference, drift extent."""
        ok = ~np.isnan(self.shifts).any(axis=1)
        diff = self.shifts[ok] - self.fft_shifts[ok]
        verified = ok & ~np.isnan(self.fft_shifts).any(axis=1)
        return {
            "frames": self.n_frames,
            "constant_frames": int((~ok).sum()),
            "agreement": float(self.agree[verified].mean()) if verified.any() else float("nan"),
            "rms_vs_fft": float(np.sqrt(np.mean(diff[~np.isnan(diff).any(axis=1)] ** 2)))
            if verified.any() else float("nan"),
            "max_abs_shift": float(np.nanmax(np.abs(self.shifts))) if ok.any() else float("nan"),
        }

    def csv_text(self) -> str:
        rows = ["frame,source,dy,dx,peak,confidence,fft_dy,fft_dx,agree"]
        for i in range(self.n_frames):
            dy, dx = self.shifts[i]
            fy, fx = self.fft_shifts[i]
            src = self.sources[i].replace('"', '""')
            src = f'"{src}"' if ("," in src or '"' in src) else src
            rows.append(f"{i},{src},{dy:.4f},{dx:.4f},{self.peak[i]:.6g},"
                        f"{self.confidence[i]:.4g},{fy:.4f},{fx:.4f},{str(bool(self.agree[i])).lower()}")
        return "\n".join(rows) + "\n"


class ArraySource:
    """An in-memory ``(N, H, W)`` stack behaving like :class:`xcorr_app.stack_reader.FrameSource`."""

    def __init__(self, stack, name="array"):
        if stack.ndim == 2:
            stack = stack[None]
        if stack.ndim != 3:
            raise InputError(f"a stack must be (N, H, W) or one (H, W) frame, got shape {stack.shape}")
        if 0 in stack.shape:
            raise InputError(f"cannot align an empty stack of shape {stack.shape}")
        self.stack, self.name = stack, name
        self.n_frames, self.frame_shape, self.dtype = stack.shape[0], stack.shape[1:], stack.dtype
        self.notes, self.paths = [], []

    def source_name(self, i):
        return self.name

    def read(self, start, stop):
        return self.stack[start:stop]

    def chunks(self, chunk_frames):
        for start in range(0, self.n_frames, chunk_frames):
            yield start, self.read(start, min(start + chunk_frames, self.n_frames))

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_source(stack_or_path, channel=None):
    """A frame source for a path (TIFF file or folder) or an array."""
    if isinstance(stack_or_path, (str, Path)):
        from .stack_reader import open_stack

        return open_stack(stack_or_path, channel=channel)
    return ArraySource(stack_or_path)


def parse_prefilter(spec):
    """``None | "none" | "gaussian:S" | "dog:S1,S2"`` -> a function of a float32 stack, or None."""
    if spec in (None, "none"):
        return None
    name = str(spec).partition(":")[0]
    if name not in ("gaussian", "dog"):
        raise XcorrError(f"unknown prefilter {spec!r}; use none, gaussian:SIGMA or dog:S1,S2")
    from .filters import parse_kernel_spec

    fn = parse_kernel_spec(str(spec))
    return lambda frames: fn(frames, "reflect", 0.0)


def prepare(frames, xp, first_index, src, prefilter=None):
    """float32 on the device, prefiltered, mean subtracted; NaN/Inf are an error.

    Returns ``(frames, raw, constant)``: the prepared frames, the same frames mean-subtracted
    but not prefiltered (what the FFT reference measures), and flags of constant frames.
    """
    f = xp.asarray(frames).astype(xp.float32)
    finite = xp.isfinite(f).reshape(len(f), -1).all(axis=1)
    if not bool(finite.all()):
        bad = int(np.flatnonzero(backend.to_numpy(~finite))[0]) + first_index
        raise InputError(f"frame {bad} ({src.source_name(bad)}) has NaN or Inf pixels; replace "
                         "them (for example with the frame median) before aligning")
    constant = (f == f[:, :1, :1]).reshape(len(f), -1).all(axis=1)
    f -= f.mean(axis=(1, 2), keepdims=True)
    if prefilter is None:
        return f, f, constant
    g = prefilter(f).astype(xp.float32, copy=False)
    return g - g.mean(axis=(1, 2), keepdims=True), f, constant


def mean_frame(src, xp, chunk_frames):
    """The mean of all frames, in one streaming pass."""
    acc = xp.zeros(src.frame_shape, dtype=xp.float64)
    for _, chunk in src.chunks(chunk_frames):
        acc += xp.asarray(chunk).astype(xp.float64).sum(axis=0)
    return acc / src.n_frames


def reference_frame(reference, src, xp, chunk_frames, channel=None):
    """The reference image for ``first | mean | INDEX | path`` (``previous`` is handled apart)."""
    if isinstance(reference, (int, np.integer)) or (isinstance(reference, str) and reference.lstrip("-").isdigit()):
        idx = int(reference)
        if not -src.n_frames <= idx < src.n_frames:
            raise XcorrError(f"reference index {idx} is out of range for {src.n_frames} frames")
        return xp.asarray(src.read(idx % src.n_frames, idx % src.n_frames + 1)[0])
    if reference == "first":
        return xp.asarray(src.read(0, 1)[0])
    if reference == "mean":
        return mean_frame(src, xp, chunk_frames)
    if isinstance(reference, (str, Path)) and Path(reference).exists():
        from .stack_reader import read_image

        img = read_image(reference, channel=channel)
        if tuple(img.shape) != tuple(src.frame_shape):
            raise InputError(f"reference image {reference} is {img.shape[0]}x{img.shape[1]} but the "
                             f"frames are {src.frame_shape[0]}x{src.frame_shape[1]}")
        return xp.asarray(img)
    if not isinstance(reference, (str, Path)):  # an array
        ref = xp.asarray(reference)
        if tuple(ref.shape) != tuple(src.frame_shape):
            raise InputError(f"reference of shape {ref.shape} does not match frames {src.frame_shape}")
        return ref
    raise XcorrError(f"unknown reference {reference!r}: use first, mean, previous, a frame index "
                     "or an image file")


def estimate_shifts(reference, frames, *, max_shift=None, normalization="zncc",
                    subpixel="gaussian", upsample=20, prefilter=None, device="auto"):
    """Shifts of a batch of frames already in memory against one reference (or one each).

    Parameters
    ----------
    reference : (H, W) or (N, H, W) ndarray
        One reference for all frames, or one per frame.
    frames : (N, H, W) ndarray
    max_shift : int or (int, int), optional
        Search only ``-max_shift..max_shift``; default: every shift (FFT correlation).
    normalization : {"zncc", "none"}
        ``zncc``: zero-normalized per shift over the overlap; ``none``: mean-subtracted sums.
    subpixel : {"none", "parabolic", "gaussian", "upsample"}
    upsample : int
        Factor of the upsampled-DFT refinement (``subpixel="upsample"``).
    prefilter : {None, "gaussian:S", "dog:S1,S2"}
        Filter both images first (noise or background suppression).

    Returns
    -------
    shifts (N, 2), peak (N,), confidence (N,) : arrays of the input's module
    """
    xp = backend.xp_for(backend.compute_device(reference, frames, device=device))
    pre = parse_prefilter(prefilter)
    src = ArraySource(xp.asarray(frames))
    mov = prepare(src.stack, xp, 0, src, pre)[0]
    ref = xp.asarray(reference)
    ref = prepare(ref if ref.ndim == 3 else ref[None], xp, 0, ArraySource(ref), pre)[0]
    ref = ref if xp.asarray(reference).ndim == 3 else ref[0]
    shifts, peak, conf = _correlate_and_peak(ref, mov, max_shift, normalization, subpixel,
                                             upsample, xp)
    return tuple(backend.like_input(a, reference, frames) for a in (shifts, peak, conf))


def _check_choices(normalization, subpixel):
    if subpixel not in SUBPIXEL:
        raise XcorrError(f"unknown subpixel method {subpixel!r}; use one of {', '.join(SUBPIXEL)}")
    if normalization not in NORMALIZATIONS:
        raise XcorrError(f"unknown normalization {normalization!r}; use one of "
                         f"{', '.join(NORMALIZATIONS)}")


def _correlate_and_peak(ref, mov, max_shift, normalization, subpixel, upsample, xp):
    _check_choices(normalization, subpixel)
    dev = "gpu" if xp is not np else "cpu"
    if ref.ndim == 3:  # one reference per frame
        corr = cross_correlate(ref, mov[:, None], "n_to_mn", max_shift, device=dev)[:, 0]
    else:
        corr = cross_correlate(ref, mov, "one_to_many", max_shift, device=dev)
    if normalization == "zncc":
        corr = zncc(corr, ref, mov, max_shift)
    origin = shift_origin(ref.shape, mov.shape, max_shift)
    shifts, peak, conf = find_shifts(corr, origin, "none" if subpixel == "upsample" else subpixel)
    if subpixel == "upsample":
        shifts = refine_upsampled(ref, mov, shifts, upsample)
    return shifts, peak, conf


def _agree(shifts, fft_shifts_, fft_int, max_shift):
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


def align(stack_or_path, reference="first", *, max_shift=None, normalization="zncc",
          subpixel="gaussian", upsample=20, prefilter="gaussian:1", verify=True, channel=None,
          chunk_frames=64, device="auto", progress=None):
    """Measure the shift of every frame of a stack against a reference.

    Parameters
    ----------
    stack_or_path : ndarray (N, H, W), str or Path
        A stack in memory (NumPy or CuPy) or a TIFF file / folder of TIFFs.
    reference : {"first", "mean", "previous"}, int, path or ndarray
        ``previous`` correlates each frame with the one before and accumulates the shifts.
    max_shift : int or (int, int), optional
        Bound of the search; default every shift (FFT correlation).
    normalization : {"zncc", "none"}
        ``zncc`` (default): zero-normalized cross-correlation per shift over the overlap, from
        summed-area tables; ``none``: mean-subtracted correlation sums.
    subpixel : {"gaussian", "parabolic", "gaussian3", "parabolic3", "upsample", "none"}
        ``gaussian`` (default) and ``parabolic`` fit the 3x3 neighbourhood of the peak in 2-D,
        the ``...3`` variants fit 3 points along each axis, ``upsample`` refines by the
        upsampled DFT (Guizar-Sicairos) to ``1 / upsample`` px.
    upsample : int
        Upsampling factor for ``subpixel="upsample"``.
    prefilter : {"gaussian:1", "gaussian:S", "dog:S1,S2", "none"}
        Filter applied to every frame and the reference before correlation (the FFT reference
        measurement sees the same filtered frames).
    verify : bool
        Also measure every frame with the FFT reference and report agreement.
    channel : int, optional
        Channel of multi-channel files.
    chunk_frames : int
        Frames processed per step.
    device : {"auto", "gpu", "cpu"}
    progress : callable(int), optional
        Called with the number of frames finished after each chunk.

    Returns
    -------
    AlignResult
    """
    max_shift = normalize_max_shift(max_shift)
    _check_choices(normalization, subpixel)
    pre = parse_prefilter(prefilter)
    if chunk_frames < 1:
        raise XcorrError(f"chunk_frames must be >= 1, got {chunk_frames}")
    dev = backend.compute_device(*([stack_or_path] if not isinstance(stack_or_path, (str, Path))
                                   else []), device=device)
    xp = backend.xp_for(dev)
    with open_source(stack_or_path, channel) as src:
        h, w = src.frame_shape
        if h * w < 2:
            raise InputError(f"frames of {h}x{w} pixel cannot be registered: at least 2 pixels "
                             "are needed")
        previous = isinstance(reference, str) and reference == "previous"
        ref = None
        if not previous:
            ref, ref_raw, ref_const = prepare(
                reference_frame(reference, src, xp, chunk_frames, channel)[None], xp, 0, src, pre)
            if bool(ref_const[0]):
                raise InputError("the reference image is constant; choose another --reference")
            ref = ref[0]
            ref_fft = xp.fft.fft2(ref_raw[0])
        n = src.n_frames
        shifts = np.zeros((n, 2))
        peak, conf = np.zeros(n), np.zeros(n)
        fft_sh = np.full((n, 2), np.nan)
        agree = np.zeros(n, bool)
        const = np.zeros(n, bool)
        last = None  # previous mode: the last frame (prepared, raw) of the chunk before
        for start, chunk in src.chunks(chunk_frames):
            frames, raw, c = prepare(chunk, xp, start, src, pre)
            stop = start + len(frames)
            const[start:stop] = backend.to_numpy(c)
            if previous:
                first = (frames[:1], raw[:1]) if last is None else (last[0][None], last[1][None])
                refs = xp.concatenate([first[0], frames[:-1]])
                refs_raw = xp.concatenate([first[1], raw[:-1]])
                last = (frames[-1], raw[-1])
                s, p, k = _correlate_and_peak(refs, frames, max_shift, normalization, subpixel,
                                              upsample, xp)
            else:
                s, p, k = _correlate_and_peak(ref, frames, max_shift, normalization, subpixel,
                                              upsample, xp)
            shifts[start:stop] = backend.to_numpy(s)
            peak[start:stop], conf[start:stop] = backend.to_numpy(p), backend.to_numpy(k)
            if verify:
                fr = xp.fft.fft2(refs_raw) if previous else ref_fft
                fs, _, fi = fft_shifts(fr, raw, upsample_factor=FFT_REFERENCE_UPSAMPLE,
                                       reference_is_fft=True, return_integer=True)
                fft_sh[start:stop] = backend.to_numpy(fs)
                agree[start:stop] = _agree(shifts[start:stop], fft_sh[start:stop],
                                           backend.to_numpy(fi), max_shift)
            if progress is not None:
                progress(len(frames))
        sources = [src.source_name(i) for i in range(n)]
        notes = list(src.notes)
    if previous:
        const_step = const | np.roll(const, 1)
        const_step[0] = const[0]
        steps = np.where(const_step[:, None], 0.0, shifts)
        steps[0] = 0.0
        shifts = np.cumsum(steps, axis=0)
        if verify:
            fft_steps = np.where(const_step[:, None], 0.0, fft_sh)
            fft_steps[0] = 0.0
            fft_sh = np.cumsum(fft_steps, axis=0)
    shifts[const] = np.nan
    conf[const] = 0.0
    agree[const] = False
    settings = {"reference": str(reference) if not hasattr(reference, "shape") else "array",
                "max_shift": list(max_shift) if max_shift else None,
                "normalization": normalization, "prefilter": prefilter or "none", "subpixel": subpixel,
                "upsample": upsample, "verify": verify, "channel": channel, "device": dev,
                "notes": notes}
    return AlignResult(shifts, peak, conf, fft_sh, agree, sources, settings)


def apply_shifts(stack_or_path, shifts, *, channel=None, fill=0.0, chunk_frames=64, device="auto"):
    """Yield ``(start, aligned_chunk)`` (float32 NumPy) for every chunk of the stack."""
    from .warp import shift_frames

    xp = backend.xp_for(backend.resolve_device(device))
    with open_source(stack_or_path, channel) as src:
        for start, chunk in src.chunks(chunk_frames):
            frames = xp.asarray(chunk).astype(xp.float32)
            out = shift_frames(frames, xp.asarray(shifts[start:start + len(frames)]), fill=fill)
            yield start, backend.to_numpy(out)
