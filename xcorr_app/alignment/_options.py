"""The settings of an alignment run: the choices, their checks, and :class:`AlignOptions`.

Examples
--------
>>> opts = AlignOptions(max_shift=4, subpixel="parabolic")
>>> opts.max_shift, opts.previous, search_range((64, 80), None)
((4, 4), False, (32, 40))
>>> AlignOptions(subpixel="cubic")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
xcorr_app.errors.InputError: unknown subpixel method 'cubic'; use one of auto, gaussian, ...
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from pathlib import Path

import numpy as np

from .. import backend
from ..backend import DEVICES
from ..correlate import normalize_max_shift, output_shape
from ..errors import InputError, check_flags, check_keywords
from ..io import SUPPORTED_DTYPES, parse_axes
from ..registration import DEFAULT_UPSAMPLE, MAX_UPSAMPLE
from ..streaming import parse_memory
from .rigid import (AUTO_LOWPASS, CHOICES, NAN_MASK, check_choices, choose_prefilter,
                    is_previous, mean_count, parse_bidi, parse_prefilter, prefilter_for, prepare, read_mask,
                    refined_passes,
                    search_range)
from .rigid import window as make_window
from .rigid import parse_static, reference_index, static_possible
from .rigid import DESPIKE
from .._run_options import RunOptions

#: how frames meet at their edges: ``linear`` (the overlap: frames cropped from a larger
#: scene), ``circular`` (wrap-around content: circular shifts, periodic test data), ``auto``
#: (decided after the first pass: :func:`xcorr_app.alignment.refine._template.periodic_frames`)
BOUNDARIES = ("auto", "linear", "circular")
#: ``lucas_kanade``: the Lucas-Kanade refinement against a denoised template
#: (:mod:`xcorr_app.alignment.refine._refine_lk`) on, against the reference itself in the pass
#: (``reference``: :mod:`xcorr_app.alignment.refine._refine_reference`), off, or ``auto`` (the
#: template's for noisy stacks, the reference's for steady ones)
LUCAS_KANADE = ("auto", "on", "off", "reference")
#: ``model``: ``translation`` (a shift per frame) or ``rigid-body`` (a rotation about the
#: frame's centre and a shift: :mod:`xcorr_app.alignment._rotation`)
MODELS = ("translation", "rigid-body")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AlignOptions(RunOptions):
    """Every option of one alignment run, checked once, with its default stated here alone.

    :func:`xcorr_app.align`, ``xcorr align``, ``--gpus`` and :func:`xcorr_app.dask.align` all
    build this object and hand it down; the pipeline's steps read from it, and
    :attr:`AlignResult.settings` records what ran.  The fields are plain values, so the object
    travels to other processes.  Construction checks every value and every combination
    (:meth:`__post_init__`); :meth:`check_executor` adds the few limits of one executor.  The
    meaning of each option is documented on :func:`xcorr_app.align`.
    """

    reference: object = "first"
    max_shift: tuple | None = None
    normalization: str = "zncc"
    subpixel: str = "auto"
    upsample: int | None = None
    prefilter: str | None = "auto"
    window: str | None = "none"
    features: str | None = None
    boundary: str = "auto"
    lucas_kanade: str = "auto"
    verify: bool = True
    quality: bool = True
    min_confidence: float | None = None
    interpolate_low: bool = False
    patches: tuple | None = None
    patch_overlap: object = None
    max_deviation: int = 4
    patch_template_passes: int = 0
    channel: int | None = None
    axes: str | None = None
    chunk_frames: int | None = None
    max_memory: int | None = None
    device: str = "auto"
    gpus: object = None
    tune: bool = False
    bidi: object = "off"
    mask: object = None
    model: str = "translation"
    static: str = "auto"
    despike: str = "auto"

    def __post_init__(self):
        put = functools.partial(object.__setattr__, self)
        put("max_shift", normalize_max_shift(_no_bool(self.max_shift, "max_shift")))
        put("subpixel", check_choices(self.normalization, self.subpixel))
        _choice("boundary", self.boundary, BOUNDARIES)
        _choice("lucas_kanade", self.lucas_kanade, LUCAS_KANADE)
        _choice("device", self.device, DEVICES)
        _choice("despike", self.despike, DESPIKE)
        put("reference", _check_reference(self.reference))
        if self.upsample is not None:
            put("upsample", check_upsample(self.upsample))
            if self.subpixel != "upsample" and self.boundary == "linear":
                raise InputError(f"upsample {self.upsample} is used by subpixel upsample and the "
                                 "circular refinement; with subpixel "
                                 f"{self.subpixel} and boundary linear it would be ignored")
        if self.lucas_kanade == "on" and not self.lk_possible:
            raise InputError("lucas_kanade on needs reference first or refined[:ITER] and a "
                             "normalization other than phase")
        if self.lucas_kanade == "reference" and not self.reference_fit_possible:
            raise InputError("lucas_kanade reference needs one reference image (first, a "
                             "frame's index, mean:N or a file; not previous or refined), a "
                             "normalization other than phase, no features nor window, a "
                             "boundary other than circular and a subpixel method other than "
                             "none")
        parse_prefilter(self.prefilter)  # a bad spec fails before anything is read
        if self.features:
            from ..filters import bank_weights

            bank_weights(self.features, 1)
        check_flags(**{flag: getattr(self, flag)
                       for flag in ("verify", "quality", "interpolate_low", "tune")})
        if self.min_confidence is not None:
            v = _no_bool(self.min_confidence, "min_confidence")
            if not isinstance(v, numbers.Real) or not v >= 0 or not np.isfinite(v):
                raise InputError(f"min_confidence must be a number >= 0, got {v!r}")
        if self.interpolate_low and self.min_confidence is None:
            raise InputError("interpolate_low needs min_confidence to know which frames to "
                             "replace")
        if self.channel is not None:
            put("channel", _whole("channel", self.channel, 0))
        put("axes", parse_axes(self.axes))  # (the run reads its path with them: with_axes)
        if self.chunk_frames is not None:
            put("chunk_frames", _whole("chunk_frames", self.chunk_frames, 1))
        if self.max_memory is not None:
            put("max_memory", parse_memory(self.max_memory))
        self._check_patches(put)
        put("bidi", parse_bidi(self.bidi))
        if self.bidi != "off" and self.patches is not None:
            raise InputError(f"bidi {self.bidi} corrects the frames of a rigid run; patches "
                             "read the stack as it is: run without patches, or give bidi off")
        if self.gpus is not None:
            if self.device == "cpu":
                raise InputError("gpus shares the frames out over GPUs; drop device='cpu'")
            put("gpus", _gpu_spec(self.gpus))
        self._check_mask(put)
        self._check_model()
        self._check_static(put)

    def _check_patches(self, put):
        if self.patches is None:
            for name, default in (("patch_overlap", None), ("max_deviation", 4),
                                  ("patch_template_passes", 0)):
                if getattr(self, name) != default:
                    raise InputError(f"{name} needs patches (piecewise-rigid): give "
                                     "patches=GYxGX too")
            return
        from .piecewise import check_deviation, check_template_passes, parse_patches

        put("patches", parse_patches(self.patches))
        put("max_deviation", check_deviation(self.max_deviation))
        put("patch_template_passes", check_template_passes(self.patch_template_passes))
        if self.patch_overlap is not None:
            ov = self.patch_overlap
            pair = (ov, ov) if isinstance(ov, numbers.Integral) else tuple(ov) \
                if isinstance(ov, (tuple, list)) else ()
            if len(pair) != 2 or any(isinstance(v, bool) or not isinstance(v, numbers.Integral)
                                     or v < 0 for v in pair):
                raise InputError(f"patch_overlap must be a non-negative integer (or a pair), "
                                 f"got {ov!r}")
            put("patch_overlap", int(ov) if isinstance(ov, numbers.Integral)
                else tuple(int(v) for v in pair))
        if self.previous:
            raise InputError("patches are measured against one reference: reference 'previous' "
                             "is not available with patches")

    def _check_static(self, put):
        """``static``: ``auto``, ``on`` or ``off`` (:mod:`.rigid._static`); ``on`` where the
        pattern cannot be removed (patches, a mask, rigid-body, a reference image of its own)
        is refused, ``auto`` is not checked there."""
        put("static", parse_static(self.static))
        why_not = static_possible(self)
        if self.static == "on" and why_not is not None:
            raise InputError(f"static on removes a pattern fixed on the sensor from the frames "
                             f"the rigid passes read: {why_not} is not available with it")

    def _check_model(self):
        """``model``: ``rigid-body`` measures 3x3 patches of every frame against one template
        and warps by a rotation and a shift (:mod:`._rotation`); what it cannot take is
        refused (the executors: :meth:`check_executor`)."""
        _choice("model", self.model, MODELS)
        if self.model == "translation":
            return
        for bad, what in ((self.patches is not None, "patches (a motion field of their own)"),
                          (self.previous, "reference 'previous' (one reference for every "
                           "frame)"),
                          (self.bidi != "off", f"bidi {self.bidi}"),
                          (self.mask is not None, "mask")):
            if bad:
                raise InputError(f"model rigid-body measures each frame's rotation and shift "
                                 f"against one template: {what} is not available with it")

    def _check_mask(self, put):
        """``mask``: read and checked once (:func:`~.rigid.read_mask`; its shape against the
        frames: :func:`~._limits.check_limits`); the image kept beside the option as given.
        The masked ZNCC takes the place of the search of every pass, so what measures unmasked
        (another normalization, the upsampled DFT, the circular and Lucas-Kanade refinements,
        templates of moved frames, patches) is refused, ``auto`` decides ``linear`` and
        Lucas-Kanade ``off``, and the FFT check and the quality report, which measure whole
        frames, are not made (:data:`MASK_NOTE`)."""
        object.__setattr__(self, "_mask_image", None)
        if self.mask is None:
            return
        given, image = read_mask(self.mask)
        if given != "array":
            put("mask", given)
        for bad, what in ((self.normalization != "zncc", f"normalization={self.normalization!r}"),
                          (self.subpixel == "upsample", "subpixel='upsample'"),
                          (self.upsample is not None, f"upsample={self.upsample}"),
                          (self.boundary == "circular", "boundary='circular'"),
                          (self.lucas_kanade in ("on", "reference"),
                           f"lucas_kanade={self.lucas_kanade!r}"),
                          (self.refined is not None, f"reference={self.reference!r}"),
                          (self.patches is not None, "patches")):
            if bad:
                raise InputError(f"mask measures every frame by masked zero-normalized "
                                 f"cross-correlation, refined on its surface: {what} is not "
                                 "available with a mask")
        put("boundary", "linear")
        put("lucas_kanade", "off")
        put("verify", False)
        put("quality", False)
        if image is None and (self.previous or mean_count(self.reference, 1) is not None):
            # (mask "nan": a mask a frame; a mean would add the frames' NaN pixels in)
            raise InputError(f"mask nan measures each frame on its own finite pixels against "
                             f"one frame: reference={self.reference!r} is not available with "
                             f"it (use first or a frame's index)")
        object.__setattr__(self, "_mask_image", image)

    @property
    def mask_image(self):
        """The ``mask`` as a 2-D NumPy bool image (True: the pixel is used), or ``None``
        (none, or ``"nan"``: :attr:`masks_nan`)."""
        return self._mask_image

    @property
    def masks_nan(self) -> bool:
        """``mask="nan"``: each frame's NaN or infinite pixels left out, a mask a frame."""
        return self.mask is not None and self._mask_image is None

    def check_executor(self, executor):
        """Refuse what ``executor`` (``"process"``, ``"gpus"``, ``"dask"``) cannot run, with the
        same line on every path."""
        if executor == "dask" and self.gpus is not None:
            raise InputError("gpus=... runs without Dask: give either gpus=LIST or a Dask "
                             "cluster, not both")
        if executor != "process" and self.mask is not None:
            raise InputError(f"mask is measured in one process: run without "
                             f"{'gpus' if executor == 'gpus' else 'a Dask cluster'}, or give "
                             "no mask")
        if executor != "process" and self.static == "on":
            raise InputError(f"static on is found and removed in one process: run without "
                             f"{'gpus' if executor == 'gpus' else 'a Dask cluster'}, or give "
                             "static auto or off")
        if executor != "process" and self.despike == "on":
            raise InputError(f"despike on takes bright specks out of the frames in one "
                             f"process: run without "
                             f"{'gpus' if executor == 'gpus' else 'a Dask cluster'}, or give "
                             "despike auto or off")
        if executor != "process" and self.model != "translation":
            raise InputError(f"model {self.model} runs in one process: run without "
                             f"{'gpus' if executor == 'gpus' else 'a Dask cluster'}, or give "
                             "model translation")
        if executor != "process" and self.bidi != "off":
            raise InputError(f"bidi {self.bidi} corrects the frames in one process: run "
                             f"without {'gpus' if executor == 'gpus' else 'a Dask cluster'}, "
                             "or give bidi off")

    @property
    def upsample_factor(self) -> int:
        """The upsampled DFT's factor: ``upsample``, or :data:`DEFAULT_UPSAMPLE`."""
        return DEFAULT_UPSAMPLE if self.upsample is None else self.upsample

    @property
    def previous(self) -> bool:
        return is_previous(self.reference)

    @property
    def from_first(self) -> bool:
        """Whether the reference is made from the first frame (``first``, or the ``refined``
        templates that start from it)."""
        return isinstance(self.reference, str) and (self.reference == "first"
                                                     or self.refined is not None)

    @property
    def from_template(self) -> bool:
        """On the options the passes decided (:func:`~._run.measure_passes`): whether the last
        pass measured against a template of the frames made from the first frame (``refined``
        passes, Lucas-Kanade ``on``, a circular template), not against the reference itself:
        its results are still in frame 0's place, its orientation is the frames' mean."""
        return self.from_first and (self.refined is not None or self.lucas_kanade == "on"
                                    or (self.boundary == "circular" and self.lk_possible))

    @property
    def reference_frame(self) -> int | None:
        """The frame whose place the results are in: 0 for :attr:`from_first`, a reference
        index as given (negative: from the end), else None (the mean, an image)."""
        return 0 if self.from_first else reference_index(self.reference)

    @property
    def lk_possible(self) -> bool:
        """Whether the Lucas-Kanade refinement (:mod:`~xcorr_app.alignment.refine._refine_lk`) can
        run: a template built from the first frame (``first`` or ``refined``), not phase."""
        return self.from_first and self.normalization != "phase"

    @property
    def reference_fit_possible(self) -> bool:
        """Whether the Gauss-Newton fit against the reference
        (:mod:`~xcorr_app.alignment.refine._refine_reference`) can run: one reference image
        measured linearly to a subpixel shift (not ``previous`` nor template passes, not phase,
        no feature bank nor window, boundary not circular, subpixel not none)."""
        return (not self.previous and self.refined is None and self.normalization != "phase"
                and not self.features and self.window in (None, "none")
                and self.boundary != "circular" and self.subpixel != "none")

    @property
    def refined(self) -> int | None:
        """Template passes of ``reference="refined[:ITER]"``, else ``None``."""
        return refined_passes(self.reference)

    def measuring(self):
        """The options the measuring loop runs with: with ``boundary="circular"`` the integer
        peak is refined on the circular cross-correlation (the upsampled DFT of
        :func:`~xcorr_app.registration._fft_register.refine_upsampled`) instead of by a fit to
        the linear-overlap surface, which wrap-around content biases (the strips that wrapped
        do not match, and the fit leans away from them)."""
        if self.boundary == "circular" and self.normalization != "phase":
            return self._decided(subpixel="upsample")
        return self

    def surface_shape(self, frame_shape):
        return output_shape(frame_shape, frame_shape, search_range(frame_shape, self.max_shift))

    def prefilter_function(self):
        """This run's prefilter as a function of a float32 stack
        (:func:`~.rigid.prefilter_for`: a :class:`~.rigid.Prefilter`, a filter bank's, or
        None)."""
        return prefilter_for(self.prefilter, self.normalization, self.features)

    def preparer(self, xp, frame_shape):
        """``prepare`` with this run's prefilter and window, for frames on ``xp``'s device."""
        pre = self.prefilter_function()
        win = make_window(self.window, frame_shape, xp)
        return lambda frames: prepare(frames, xp, pre, win)

    def settings(self) -> dict:
        """The options as plain JSON values (``AlignResult.settings["options"]``)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            plain = v is None or isinstance(v, (str, bool, int, float))
            out[f.name] = "array" if hasattr(v, "shape") else list(v) \
                if isinstance(v, tuple) else v if plain else str(v)
        return out

    def arguments(self) -> dict:
        """The options as keyword arguments of :func:`xcorr_app.align` (no copies)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_arguments(cls, reference=None, options=None, **keywords):
        """The options of a call such as ``align(stack, reference, **keywords)``, or
        ``options``, an :class:`AlignOptions` built before (as they are: checked once, when
        built); an unknown keyword is an :class:`InputError` that names the nearest option."""
        if options is not None:
            if not isinstance(options, cls):
                raise InputError(f"options must be an AlignOptions, got "
                                 f"{type(options).__name__}")
            if reference is not None or keywords:
                given = ", ".join((["reference"] if reference is not None else [])
                                  + sorted(keywords))
                raise InputError(f"give the run's options either as options= or as keywords, "
                                 f"not both ({given})")
            return options
        check_keywords(keywords, {f.name for f in dataclasses.fields(cls)})
        if reference is not None:
            keywords["reference"] = reference
        return cls(**keywords)


def _no_bool(value, name):
    if isinstance(value, (bool, np.bool_)):
        raise InputError(f"{name} must be a number, got {value!r}")
    return value


def check_upsample(value) -> int:
    """The upsampled DFT's factor ``value`` as an int from 1 to
    :data:`~xcorr_app.registration.MAX_UPSAMPLE`, else an :class:`InputError` (the one check of
    2-D runs' ``upsample``: :class:`AlignOptions` and :func:`~._api.estimate_shifts`).

    >>> check_upsample(20)
    20
    """
    return _whole("upsample", value, 1, MAX_UPSAMPLE)


def _whole(name, value, least, most=None):
    """``value`` as an int in ``least..most``, else an :class:`InputError` naming ``name``."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if not ok or value < least or (most is not None and value > most):
        span = f">= {least}" if most is None else f"from {least} to {most}"
        raise InputError(f"{name} must be a whole number {span}, got {value!r}")
    return int(value)


def _choice(name, value, choices):
    if value not in choices:
        raise InputError(f"unknown {name} {value!r}; use one of {', '.join(choices)}")


def _check_reference(reference):
    """The reference's kind, checked before anything is read (its image: when read); a NumPy
    integer (``np.argmax``'s) or 0-d integer array as the frame index it is, an ``int``."""
    if isinstance(reference, (bool, np.bool_)) or reference is None:
        raise InputError(f"reference must be one of {CHOICES}; got {reference!r}")
    if not isinstance(reference, str) and (getattr(reference, "shape", None) == ()
                                           or isinstance(reference, numbers.Number)):
        if np.issubdtype(np.asarray(reference).dtype, np.integer):
            return int(reference)
        raise InputError(f"reference {reference!r} is neither a frame index (an integer) nor "
                         f"an image (H, W) array; use one of {CHOICES}")
    if isinstance(reference, (str, Path)) and not str(reference).strip():
        raise InputError(f"reference is empty; use one of {CHOICES}")
    refined_passes(reference)  # a bad refined:ITER
    mean_count(reference, 1)  # a bad mean:N
    if hasattr(reference, "shape") and hasattr(reference, "dtype"):
        return in_native_order(reference, "the reference")
    return reference


def _gpu_spec(gpus):
    """``gpus`` as given, its form checked here (which GPUs exist: when the run starts)."""
    if isinstance(gpus, str):
        text = gpus.strip()
        if text == "all" or (text and all(t.strip().isdigit() for t in text.split(","))):
            return text
    elif isinstance(gpus, (list, tuple)) and gpus and all(
            isinstance(g, numbers.Integral) and not isinstance(g, bool) and g >= 0
            for g in gpus):
        return tuple(int(g) for g in gpus)
    raise InputError(f"gpus {gpus!r}: give GPU numbers, e.g. '0,1' or [0, 1], or 'all'")


def resolve_auto(opts, src):
    """``(opts, why)``: ``opts`` with ``prefilter="auto"`` decided for the open source ``src``
    (:func:`~xcorr_app.alignment.rigid._preprocess.choose_prefilter`) and the reason of the choice;
    unchanged (``why`` None) where the prefilter is given, or unused (phase correlation,
    ``features``)."""
    if opts.prefilter != "auto" or opts.features or opts.normalization == "phase":
        return opts, None
    spec, why = choose_prefilter(src, NAN_MASK if opts.masks_nan else opts.mask_image)
    return opts._decided(prefilter=spec), why


#: the note of a run with a ``mask``: what it does not make
MASK_NOTE = ("mask: no FFT reference check and no quality report (both measure whole frames, "
             "the left-out pixels too)")


def auto_notes(opts, why) -> list:
    """The notes of what ``prefilter="auto"`` chose (:func:`resolve_auto`): the band-pass is
    said, the ordinary low-pass goes unsaid; and of what a ``mask`` turned off."""
    return ([why] if why and opts.prefilter != AUTO_LOWPASS else []) + \
        ([MASK_NOTE] if opts.mask is not None else [])


def check_pixel_type(dtype, what="the stack"):
    """Refuse pixel types the TIFF reader refuses (:data:`xcorr_app.io._reader.SUPPORTED_DTYPES`:
    uint8, uint16, int16, float16, float32, float64) with an :class:`InputError`, so that arrays
    and files are treated alike (int64, uint32, bool, complex, ... are refused in both)."""
    dt = np.dtype(dtype)
    if dt not in SUPPORTED_DTYPES:
        raise InputError(f"{what} has pixels of type {dt}, which xcorr does not align; convert "
                         f"it to one of {', '.join(map(str, SUPPORTED_DTYPES))} "
                         "(for example with .astype(np.float32))")


def as_stack(stack_or_path, what="the stack"):
    """The input of :func:`~xcorr_app.align` or :func:`~xcorr_app.apply_shifts`, checked: a path
    (str or Path) as given; an array (NumPy or CuPy) of a supported pixel type
    (:func:`check_pixel_type`); a list or tuple of 2-D arrays of one shape and pixel type,
    stacked into one ``(N, H, W)`` array.  Anything else is an :class:`InputError`.

    >>> as_stack([np.zeros((4, 5), np.uint16), np.ones((4, 5), np.uint16)]).shape
    (2, 4, 5)
    """
    if isinstance(stack_or_path, (str, Path)):
        return stack_or_path
    if isinstance(stack_or_path, (list, tuple)):
        items = list(stack_or_path)
        if not items:
            raise InputError(f"{what} is an empty sequence: no frames to align")
        if any(isinstance(a, (str, Path)) for a in items):
            raise InputError(f"{what} is a sequence of paths; pass one TIFF file or a folder of "
                             "TIFFs instead")
        if not all(hasattr(a, "shape") and hasattr(a, "dtype") for a in items):
            raise InputError(f"{what} must be an array or a sequence of 2-D arrays")
        shapes = {tuple(a.shape) for a in items}
        dtypes = {np.dtype(a.dtype) for a in items}
        if len(shapes) != 1 or len(next(iter(shapes))) != 2:
            raise InputError(f"{what} is a sequence of arrays of shapes "
                             f"{sorted(shapes)}; the frames must be 2-D arrays of one shape")
        if len(dtypes) != 1:
            raise InputError(f"{what} mixes pixel types {sorted(map(str, dtypes))}; convert the "
                             "frames to one")
        xp = backend.array_module_of(*items)
        stack_or_path = xp.stack([xp.asarray(a) for a in items])
    if not (hasattr(stack_or_path, "shape") and hasattr(stack_or_path, "dtype")):
        raise InputError(f"{what} must be a path, an (N, H, W) array or a sequence of 2-D "
                         f"arrays, not {type(stack_or_path).__name__}")
    return in_native_order(stack_or_path, what)


def in_native_order(array, what):
    """``array`` with its pixels in this machine's byte order, its pixel type checked
    (:func:`check_pixel_type`): big-endian pixels, as FITS files and instruments' raw files
    map them, converted (a copy; a Dask array's blocks as they are read; a TIFF of them is
    read so anyway)."""
    dt = np.dtype(array.dtype)
    if dt.isnative or not hasattr(array, "astype"):
        check_pixel_type(dt, what)
        return array
    check_pixel_type(dt.newbyteorder("="), what)
    return array.astype(dt.newbyteorder("="))
