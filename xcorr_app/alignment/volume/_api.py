"""Rigid 3-D registration of a (T, Z, Y, X) stack: :func:`align_volumes`.

How it works: the reference volume's spectrum (``rfftn`` over the last three axes) is made
once; then the volumes stream through in chunks sized to the memory at hand: each chunk's
spectra times the reference's conjugate, the inverse transform, the integer peak within the
``max_shift`` window (of the volumes' periodic components, where the boundary is not
circular), and the subvoxel peak: for volumes cut from a larger scene by ZNCC over the overlap
at the integer shifts around it, a quadratic fit and Gauss-Newton steps (:mod:`._linear`), for
wrap-around ones (``boundary="circular"``, or told by ``"auto"``) by the 3-D upsampled DFT
(:mod:`._dft3`).
The same code runs on NumPy (SciPy's FFT) and CuPy (cuFFT).  With
``patches=(gz, gy, gx)``, piecewise-rigid: the volumes stream through once more, and every
patch is measured within ``max_deviation`` voxels of its volume's rigid shift (ZNCC over the
patch, as 2-D align's patches: :mod:`._piecewise`).

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> vol = ndi.gaussian_filter(np.random.default_rng(0).random((12, 20, 18)), 1.5)
>>> moved = np.fft.ifftn(ndi.fourier_shift(np.fft.fftn(vol), (1.5, -0.25, 2.0))).real
>>> result = align_volumes(np.stack([vol, moved]), max_shift=(3, 4, 4), device="cpu")
>>> (np.round(result.shifts, 2) + 0.0).tolist()  # (+ 0.0: no -0.0; a circular shift: told)
[[0.0, 0.0, 0.0], [-1.5, 0.25, -2.0]]
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from pathlib import Path

import numpy as np

from ...backend import (DEVICES, array_module_of, compute_device, device_free_bytes,
                       host_available_bytes, to_numpy, xp_for)
from ...correlate import conj_product
from ...errors import InputError, check_keywords
from ..._run_options import RunOptions, options_signature
from ..rigid import MIN_FRAME_SIDE, check_gpu_float32
from ...io import parse_axes, with_axes
from ...registration import DEFAULT_UPSAMPLE, MAX_UPSAMPLE
from ...streaming import DeviceChunks, parse_memory
from ._dft3 import bounded_peak, correlate, refine3d, samples3d, spectrum
from ._linear import (WRAP_VOLUMES, Reference, WrapVote, centred, circular_start,
                      linear_refine, smooth_spectrum)
from ._piecewise import (PER_WINDOW_VOXEL, low_patches, measure_patches, template_spectra,
                         volume_grid)
from ._prebuild import prebuild_volumes
from ._rows import item_sums
from ._result import VolumeResult
from ._source import open_volumes

#: bytes per voxel a volume of a chunk takes (its float32 copy, kept for the linear
#: refinement; the half spectrum; the periodic components' product; the correlation; the FFT
#: work area), besides the uploads of the chunk and of the next (the input's pixel type:
#: :func:`plan_chunk`)
PER_VOXEL_CHUNK = 20
#: bytes per voxel held once (the reference spectrum, the mean reference, slack)
PER_VOXEL_FIXED = 12
#: and held once by the linear refinement's Gauss-Newton steps (:func:`~._linear.gauss_newton`:
#: the smoothed reference and its gradient, four float32 volumes; a volume's smoothed and
#: shifted copies and their temporaries, about six)
PER_VOXEL_GAUSS_NEWTON = 40
#: share of the free memory a run plans to use
MEMORY_SHARE = 0.6
MAX_CHUNK = 64
#: voxels of a chunk at most: batches this large keep cuFFT busy, and smaller chunks let the
#: next one be read from the file while the device works (64x512x512 volumes: 8 a chunk)
CHUNK_VOXELS = 2 ** 27
#: ``boundary``: ``linear`` (volumes cut from a larger scene: ZNCC over the overlap,
#: :mod:`._linear`), ``circular`` (wrap-around volumes: the circular correlation and its
#: upsampled DFT), ``auto`` (linear, but circular for a volume that wraps around)
BOUNDARIES = ("auto", "linear", "circular")


def parse_max_shift(max_shift):
    """``None``, or a non-negative int for all three axes, or one per axis (dz, dy, dx), in
    voxels, as a 3-tuple (``None`` entries: the whole axis).

    >>> parse_max_shift(3), parse_max_shift((1, 5, 5)), parse_max_shift(None)
    ((3, 3, 3), (1, 5, 5), None)
    """
    if max_shift is None:
        return None
    values = (max_shift,) * 3 if np.ndim(max_shift) == 0 else tuple(max_shift)
    if len(values) != 3:
        raise InputError(f"max_shift {max_shift!r}: give one number or three (dz, dy, dx)")
    out = []
    for v in values:
        if v is None:
            out.append(None)
            continue
        try:  # (a NaN, an infinity or a string: no whole number either)
            whole = not isinstance(v, bool) and float(v) == int(v) and int(v) >= 0
        except (TypeError, ValueError, OverflowError):
            whole = False
        if not whole:
            raise InputError(f"max_shift {max_shift!r}: each bound is a whole number >= 0 "
                             "of voxels")
        out.append(int(v))
    return tuple(out)


def parse_upsample(upsample) -> float:
    """The upsampling factor of a subvoxel (or subpixel) refinement as a float from 1 to
    :data:`~xcorr_app.registration.MAX_UPSAMPLE` (2-D align's limit: the samples around a
    peak grow with its cube).

    >>> parse_upsample(20), parse_upsample("2.5")
    (20.0, 2.5)
    """
    span = f"give a number from 1 to {MAX_UPSAMPLE}"
    try:
        value = float(upsample)
    except (TypeError, ValueError):
        raise InputError(f"upsample {upsample!r}: {span}") from None
    if isinstance(upsample, bool) or not 1 <= value <= MAX_UPSAMPLE:  # (NaN fails too)
        raise InputError(f"upsample {upsample!r}: {span}")
    return value


def parse_voxel_size(voxel_size):
    """``None`` or three positive sizes (z, y, x) as floats."""
    if voxel_size is None:
        return None
    try:
        values = tuple(float(v) for v in voxel_size)
    except (TypeError, ValueError):
        raise InputError(f"voxel_size {voxel_size!r}: give three sizes (z, y, x)") from None
    if len(values) != 3 or not all(np.isfinite(v) and v > 0 for v in values):
        raise InputError(f"voxel_size {voxel_size!r}: give three positive sizes (z, y, x)")
    return values


@dataclasses.dataclass(frozen=True, kw_only=True)
class VolumeOptions(RunOptions):
    """Every option of one 3-D run (:func:`align_volumes`), checked and normalized once, when
    built: ``max_shift`` a 3-tuple (or None), ``voxel_size`` three floats (or None),
    ``upsample`` a float >= 1 (None: :data:`~xcorr_app.registration.DEFAULT_UPSAMPLE`),
    ``memory_limit`` bytes (or a size such as ``"2G"``), ``channel`` an int >= 0 (or None;
    the file's channel count: checked by its reader); ``patches`` ``(gz, gy, gx)`` (or None:
    rigid only; an int N: N x N x N), ``patch_overlap`` None or three ints, ``max_deviation``
    an int >= 0 (both only with patches, as 2-D align's); ``boundary`` one of
    :data:`BOUNDARIES`.  What runs below takes it as it is;
    whether a grid fits the volumes is checked once their shape is known, before any pass.

    >>> VolumeOptions(max_shift=3, upsample=None).max_shift
    (3, 3, 3)
    >>> VolumeOptions(patches="2x4x4", patch_overlap=4).patch_overlap
    (4, 4, 4)
    """

    reference: object = "first"
    max_shift: object = None
    voxel_size: object = None
    upsample: object = DEFAULT_UPSAMPLE
    device: str = "auto"
    memory_limit: object = None
    axes: object = None
    channel: object = None
    patches: object = None
    patch_overlap: object = None
    max_deviation: object = 4
    boundary: str = "auto"
    #: ``boundary="auto"``'s decision made over the whole stack before it is measured in
    #: parts (:func:`decide_boundary`), else None: each run votes
    vote: object = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        put = functools.partial(object.__setattr__, self)
        ref = self.reference
        if not (ref in ("first", "mean") if isinstance(ref, str) else
                isinstance(ref, (int, np.integer)) and not isinstance(ref, bool)):
            shown = f"an array of shape {ref.shape}" if hasattr(ref, "shape") \
                and getattr(ref, "ndim", 0) else repr(ref)  # (not its numbers)
            raise InputError(f"reference {shown}: use 'first', 'mean' or a volume index "
                             "(a reference volume of your own is not offered)")
        put("max_shift", parse_max_shift(self.max_shift))
        put("voxel_size", parse_voxel_size(self.voxel_size))
        put("upsample", parse_upsample(DEFAULT_UPSAMPLE if self.upsample is None
                                       else self.upsample))
        if self.device not in DEVICES:
            raise InputError(f"unknown device {self.device!r}; use one of {', '.join(DEVICES)}")
        if self.memory_limit is not None:
            put("memory_limit", parse_memory(self.memory_limit, "memory_limit"))
        put("axes", parse_axes(self.axes))
        c = self.channel
        if c is not None:
            if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer)) or c < 0:
                raise InputError(f"channel must be a whole number >= 0, got {c!r}")
            put("channel", int(c))
        if not isinstance(self.boundary, str) or self.boundary not in BOUNDARIES:
            raise InputError(f"boundary {self.boundary!r}: use one of {', '.join(BOUNDARIES)}")
        self._check_patches(put)

    def _check_patches(self, put):
        from ..piecewise import check_deviation, parse_overlap, parse_patches

        if self.patches is None:
            for name, default in (("patch_overlap", None), ("max_deviation", 4)):
                if getattr(self, name) != default:
                    raise InputError(f"{name} needs patches (piecewise-rigid 3-D): give "
                                     "patches=GZxGYxGX too")
            return
        put("patches", parse_patches(self.patches, ndim=3))
        put("max_deviation", check_deviation(self.max_deviation))
        put("patch_overlap", parse_overlap(self.patch_overlap, ndim=3))

    @property
    def from_first(self) -> bool:
        """Whether the reference is the first volume."""
        return isinstance(self.reference, str) and self.reference == "first"

    @property
    def from_mean(self) -> bool:
        """Whether the reference is the mean of the volumes (a pass of its own)."""
        return isinstance(self.reference, str) and self.reference == "mean"

    def own_volume(self, t):
        """The volume of a stack of ``t`` that is the reference itself (``first``, an index),
        whose shift is exactly 0; None for ``mean``."""
        if self.from_mean or not t:
            return None
        return 0 if self.from_first else self.reference_index(t)

    def reference_index(self, t) -> int:
        """The reference volume's index in a stack of ``t`` volumes (an index reference;
        negative: from the end); InputError outside the stack (the one check that needs the
        stack)."""
        if not -t <= int(self.reference) < t:
            raise InputError(f"reference {self.reference} is outside the stack's {t} volumes")
        return int(self.reference) % t


def plan_chunk(shape, xp, memory_limit=None, itemsize=2):
    """How many volumes of ``shape`` (T, Z, Y, X) of ``itemsize`` bytes a voxel one chunk
    holds; InputError, with the figures, where not even one fits beside the reference."""
    voxels = int(np.prod(shape[1:]))
    per = PER_VOXEL_CHUNK + 2 * int(itemsize)
    return fitting_chunk(shape[0], (PER_VOXEL_FIXED + PER_VOXEL_GAUSS_NEWTON) * voxels,
                         per * voxels,
                         max(1, min(MAX_CHUNK, CHUNK_VOXELS // voxels)), xp, memory_limit,
                         f"a volume of {shape[1]}x{shape[2]}x{shape[3]} needs about {{}} MiB "
                         "to register", "crop or bin the volumes")


def fitting_chunk(n, fixed, per, most, xp, memory_limit, need, remedy):
    """How many of ``n`` items (``per`` bytes each, beside ``fixed`` bytes) one chunk holds,
    at most ``most``, within ``memory_limit`` or a share of the device's free memory; an
    InputError (``need`` with its MiB, the budget, ``remedy``) where not even one fits."""
    if memory_limit is not None:
        budget, where = float(memory_limit), "allowed"
    else:
        free = device_free_bytes(xp) if xp is not np else host_available_bytes()
        where = "free on the GPU" if xp is not np else "available on the host"
        budget = None if free is None else MEMORY_SHARE * free
    if budget is None:
        return min(n, most)
    if fixed + per > budget:
        mib = 2 ** 20
        raise InputError(f"{need.format(f'{(fixed + per) / mib:.0f}')}, {budget / mib:.0f} MiB "
                         f"{where}; {remedy}, or use the other device")
    return int(max(1, min(n, most, (budget - fixed) // per)))


def reference_volume(source, options, chunk=8):
    """The reference volume of a :class:`~._source.Volumes` (``options.reference``: the
    first, the mean or an index) on ``options.device``: ``(volume, its description, the
    device)``."""
    dev = compute_device(source.data, device=options.device)
    return (*_reference(source, options, xp_for(dev), chunk), dev)


def _reference(source, options, xp, chunk):
    t = source.shape[0]
    if options.from_first:
        return source.read(0, 1, xp, scale="each")[0], "the first volume"
    if options.from_mean:
        return _mean_volume(source, xp, chunk), f"the mean of the {t} volumes"
    i = options.reference_index(t)
    return source.read(i, i + 1, xp, scale="each")[0], f"volume {i}"


def _mean_volume(source, xp, chunk):
    """The mean of the volumes, summed as stored in float64 (float64 volumes past float32's
    range too), scaled as :meth:`~._source.Volumes.read` scales a volume, float32;
    InputError (:meth:`~._source.Volumes.read`'s) where a volume holds NaN or infinity."""
    from ..rigid import scale_free

    t, total = source.shape[0], None
    for start in range(0, t, chunk):
        part = source.raw(start, min(t, start + chunk), xp).sum(axis=0, dtype=xp.float64)
        total = part if total is None else total + part
    # (xp.divide, not "/": see _dft3.spectrum)
    mean = scale_free(xp.divide(total, t).reshape(1, -1, total.shape[-1]), xp)
    if not np.isfinite(to_numpy(item_sums(mean))).all():  # (scaled: finite sums where finite)
        for start in range(0, t, chunk):  # (the volume to name: read's error)
            source.read(start, min(t, start + chunk), xp, scale="each")
        raise InputError(f"the mean of the volumes of {source.name} is past float64's range; "
                         "scale the data down first")
    return mean.reshape(total.shape).astype(xp.float32)


def _reference_spectrum(ref, name, xp):
    """``(spectrum, norm, name)`` of the reference volume ``ref``; the norm's fetch ends the
    spectrum's work, so the chunks' other stream may read it.  InputError where it is
    constant (as 2-D align's reference)."""
    spec, (norm,) = spectrum(ref[None], xp, norms=True)
    if not norm > 0:
        raise InputError(f"the reference volume ({name}) is constant: no shift can be "
                         "measured against it; choose another reference")
    return spec[0], norm, name


def align_volumes(stack, *, options=None, **keywords):
    """Rigid 3-D shifts of each volume of a (T, Z, Y, X) stack onto a reference volume (with
    ``patches``, also each volume's piecewise-rigid motion field).

    Parameters
    ----------
    stack : (T, Z, Y, X) array_like or path
        NumPy, CuPy, memory-mapped, Zarr or Dask array; or a ``.npy``, TIFF, Zarr, HDF5 or
        NWB path (``FILE:/DATASET`` too).  Read a chunk at a time, never modified.
    reference : {"first", "mean"} or int
        The first volume, the mean of all, or the volume of that index.
    max_shift : None, int or (dz, dy, dx)
        Largest shift searched per axis, in voxels (anisotropic volumes: per axis); None:
        the whole volume (lags up to half its size).
    voxel_size : None or (z, y, x)
        Only scales the micrometre columns (:attr:`VolumeResult.shifts_um`).
    upsample : float
        Subvoxel refinement of ``boundary="circular"`` (and of wrap-around volumes): the
        correlation sampled every ``1 / upsample`` voxel around the peak, then a parabola
        through the best sample; 1: integer shifts (every boundary).
    device : {"auto", "cpu", "gpu"}
    memory_limit : int or str, optional
        Bytes the run may use (default: a share of the free GPU or host memory).
    axes : str, optional
        A path's axes, one letter each in its order (``"TZYX"``, ``"ZTYX"``; ``T Z C S Y X``),
        instead of those its reader infers (:func:`xcorr_app.align`'s ``axes``): its volumes
        are its frames grouped by T and Z.  A 4-D array whose file names none is ``TZYX``.
    channel : int, optional
        The channel measured of a path to a multi-channel file (``TCZYX``, ``TZCYX``:
        required there; only its planes are read); an array in memory is one channel.
    patches : None, int or (gz, gy, gx)
        Piecewise-rigid: after the rigid pass, the shift of each of ``gz x gy x gx``
        overlapping patches of every volume (over the region every rigidly shifted volume
        covers, less ``max_deviation``) within ``max_deviation`` voxels of the volume's rigid
        shift: zero-normalized cross-correlation over the patch, a Gaussian fit through the
        peak (``upsample`` is the rigid pass's); the motion field in
        :attr:`VolumeResult.motion_field` (:func:`~._shift.warp_volumes` warps the volumes
        by it).  A patch with a low peak (below half its volume's median), on the
        ``max_deviation`` border or constant takes the rigid shift.
    patch_overlap : None, int or (oz, oy, ox)
        Voxels neighbouring patches overlap (default: a quarter of the grid's stride).
    max_deviation : int
        Largest shift of a patch from its volume's rigid shift, in voxels (each axis).
    boundary : {"auto", "linear", "circular"}
        How the volumes meet at their faces.  ``linear`` (volumes cut from a larger scene,
        content entering and leaving at the faces): the integer peak of the circular
        correlation of the volumes' periodic components, then zero-normalized
        cross-correlation over the overlap at the integer shifts around it and a quadratic
        fitted to the 27 around the best (:mod:`._linear`); ``circular`` (wrap-around
        volumes: circular shifts, test data): the circular correlation and its upsampled DFT;
        ``auto``: linear, but circular for a volume whose wrapped-around part matches the
        reference's other side.
    options : VolumeOptions, optional
        The options built before, instead of the keywords (checked once, when built).

    Returns
    -------
    VolumeResult

    Raises
    ------
    InputError
        Bad arguments or data (NaN or infinite voxels, a constant reference volume), or a
        volume too large for the memory (with the figures).  A constant volume other than
        the reference gets NaN shifts (:class:`VolumeResult`).

    Examples
    --------
    >>> import numpy as np
    >>> vol = np.random.default_rng(2).random((8, 16, 16))
    >>> stack = np.stack([vol, np.roll(vol, (1, -2, 3), axis=(0, 1, 2))])
    >>> align_volumes(stack, upsample=1, device="cpu").shifts[1].tolist()
    [-1.0, 2.0, -3.0]
    """
    if options is None:
        # (a misspelt keyword names the nearest option: it was the dataclass' TypeError)
        check_keywords(keywords, {f.name for f in dataclasses.fields(VolumeOptions) if f.init})
        options = VolumeOptions(**keywords)
    elif keywords:
        raise InputError("give the run's options either as options= or as keywords, not both")
    return _align(stack, options)


align_volumes.__signature__ = options_signature(align_volumes, VolumeOptions, ("stack",),
                                                ("options",))


def decide_boundary(stack, options: VolumeOptions, between=None) -> VolumeOptions:
    """``options`` with ``boundary="auto"``'s decision for ``stack`` in place: the vote one
    :func:`align_volumes` call over it would take (its first volumes that tell,
    :class:`~._linear.WrapVote`), reading a few volumes at a time only until decided (all of
    them where fewer tell).  A caller measuring the stack in parts gives every part these
    options, so the parts measure what one call measures; ``options`` as they are where
    ``boundary`` is not ``auto``.  The decision is this stack's: decide again for another.
    ``between``: called between the volumes read (a caller's cancel check).

    >>> import numpy as np
    >>> vol = np.random.default_rng(2).random((8, 16, 16))
    >>> stack = np.stack([vol, np.roll(vol, (1, -2, 3), axis=(0, 1, 2))])
    >>> decided = decide_boundary(stack, VolumeOptions(device="cpu"))
    >>> decided.vote.wraps, align_volumes(stack, options=decided).boundary
    (True, 'circular')
    """
    if options.boundary != "auto":
        return options
    vote = _align(stack, options._decided(patches=None, vote=None), vote_only=True,
                  between=between)
    return options._decided(vote=vote.final())


def _voxel_size(given, stack):
    """``(voxel size, note)``: the one ``given`` (µm), else the file's (its Z step and pixel
    size, in micrometers: the shifts in micrometers then come without ``voxel_size``), with a
    note saying which and where they differ; an array in memory says none."""
    said = None
    if isinstance(stack, (str, Path)):
        from ...io import calibration, micrometers

        try:
            cal = calibration(stack)
        except InputError:  # (a file that needs its axes or channel to be read says nothing)
            cal = {"pixel_size": None, "z_step": None}
        size, z = cal["pixel_size"], cal["z_step"]
        if size and z:
            um = tuple(micrometers(v, size[2]) for v in (z, size[0], size[1]))
            said = None if None in um else um
    if said is None:
        return given, None
    shown = " x ".join(f"{v:g}" for v in said)
    if given is None:
        return said, f"voxel size from the file: {shown} µm (z, y, x)"
    if not np.allclose(given, said, rtol=1e-6):
        return given, (f"voxel_size {' x '.join(f'{v:g}' for v in given)} is not the file's "
                       f"({shown} µm): the one given is used")
    return given, None


def _align(stack, options: VolumeOptions, vote_only=False, between=None):
    """:func:`align_volumes` of the built ``options``; ``vote_only``: ``boundary="auto"``'s
    vote only (:func:`decide_boundary`; ``between()`` called between its chunks)."""
    source = open_volumes(with_axes(stack, options.axes), channel=options.channel)
    if min(source.shape[-2:]) < MIN_FRAME_SIDE:  # (as 2-D frames: check_frame_shape says why)
        h, w = source.shape[-2:]
        raise InputError(f"volumes of {h}x{w} pixels in Y and X cannot be registered: both "
                         f"must be at least {MIN_FRAME_SIDE}")
    bounds, upsample = options.max_shift, options.upsample
    memory_limit = options.memory_limit
    dev = compute_device(source.data, device=options.device)
    if dev == "gpu" and np.dtype(source.data.dtype) == np.float32:
        check_gpu_float32(source.data[0], "the first volume")
    xp = xp_for(dev)
    if xp is not np:  # (a machine's first run: the later stages' kernels built meanwhile)
        prebuild_volumes(bounds, upsample, device=xp.cuda.Device().id)
    t, shape = source.shape[0], source.shape[1:]
    if options.patches is not None:  # (a grid or its memory that cannot fit: refused before
        # any pass; the grid of the rigid shifts' box is no larger)
        _patch_chunk(source, volume_grid(shape, [[0.0, 0.0, 0.0]], options), options, xp)
    chunk = plan_chunk(source.shape, xp, memory_limit, np.dtype(source.data.dtype).itemsize)
    if vote_only:  # (the vote reads a few volumes more than it counts: the reference's own)
        chunk = min(chunk, WRAP_VOLUMES + 1)
    linear = options.boundary != "circular"
    shifts, peak = np.zeros((t, 2, 3) if linear else (t, 3)), np.zeros(t)
    second, verified, constant = np.zeros(t), np.zeros(t, bool), np.zeros(t, bool)
    lin_ref = None  # (the linear refinement's reference and its periodic spectrum)
    with contextlib.ExitStack() as held:
        # read ahead (on the GPU copied on two streams) while the device works on the chunk
        # before; the reference's spectrum made at the first chunk (the mean's: a pass before)
        late, first = options.from_mean, options.from_first
        ref_spec = ref_norm = ref_name = None
        ref = None  # (the reference volume and its name: the patches' template too)
        if late:  # (the mean: a pass over the volumes itself, before theirs)
            ref = _reference(source, options, xp, chunk)
            ref_spec, ref_norm, ref_name = _reference_spectrum(*ref, xp)
            lin_ref = _linear_reference(ref[0], ref_spec, options.vote) if linear else None
            ref = ref if options.patches is not None else None
        chunks = held.enter_context(DeviceChunks(source.frames(), chunk, xp))
        for start, data in chunks:
            if ref_spec is None:  # (volume 0 from the first chunk: no read and copy of its own)
                ref = ((source.read(0, 1, xp, data[:1], scale="each")[0], "the first volume")
                       if first else _reference(source, options, xp, chunk))
                ref_spec, ref_norm, ref_name = _reference_spectrum(*ref, xp)
                lin_ref = _linear_reference(ref[0], ref_spec, options.vote) if linear else None
                ref = ref if options.patches is not None else None
            stop = start + len(data)
            vols = source.read(start, stop, xp, data, scale="each")
            del data
            if vote_only:  # (the vote alone, until decided; the caller's check between chunks)
                _measure_chunk(vols, ref_spec, ref_norm, lin_ref, bounds, upsample,
                               options.boundary, vote_only=True)
                if lin_ref[2].decided:
                    break
                if between is not None:
                    between()
                continue
            at = slice(start, stop)
            (shifts[at], peak[at], second[at], verified[at],
             constant[at]) = _measure_chunk(vols, ref_spec, ref_norm, lin_ref, bounds, upsample,
                                           options.boundary)
            del vols
    vote = None if lin_ref is None else lin_ref[2]
    wraps = options.boundary == "circular" or (options.boundary == "auto" and vote.wraps)
    if vote_only:
        return vote
    if linear:
        shifts = shifts[:, 1 if wraps else 0]
    own = options.own_volume(t)
    if own is not None:  # (the reference itself: exactly 0, its fit's rounding none, as in 2-D)
        shifts[own] = 0.0
    # constant volumes: no shift (NaN), as 2-D align's constant frames; not verified
    shifts[constant], peak[constant], verified[constant] = np.nan, np.nan, False
    with np.errstate(divide="ignore", invalid="ignore"):
        confidence = np.where(peak > 0, np.clip(1.0 - second / peak, 0.0, 1.0), 0.0)
    at_bound = np.zeros(t, bool)
    if bounds is not None:
        for a, b in enumerate(bounds):
            if b is not None and 2 * b + 1 < shape[a]:
                at_bound |= np.abs(np.round(shifts[:, a])) >= b
    notes = [f"reference: {ref_name}", f"device: {dev}, {chunk} volume(s) per chunk",
             f"search: {'whole volume' if bounds is None else f'max_shift (dz, dy, dx) = {bounds}'}"
             f", {_subvoxel_note(options.boundary, upsample, wraps, vote)}"]
    if at_bound.any():
        notes.append(f"{int(at_bound.sum())} volume(s) peak on the max_shift border: the true "
                     "shift may lie beyond it")
    if constant.any():
        notes.append(f"{int(constant.sum())} constant volume(s): shift undefined (NaN), "
                     "confidence 0, not verified")
    if not (verified | constant).all():
        notes.append(f"{int((~verified & ~constant).sum())} volume(s) whose FFT peak the direct "
                     "sum does not confirm")
    # (the file's calibration read once the volumes are measured: not for the vote alone)
    voxel_size, voxel_note = _voxel_size(options.voxel_size, with_axes(stack, options.axes))
    if voxel_note:
        notes.append(voxel_note)
    result = VolumeResult(shifts, peak, confidence, at_bound, verified, voxel_size, notes, dev,
                          boundary="circular" if wraps or not linear else "linear")
    if options.patches is not None:
        result.set_field(*_patch_pass(source, options, shifts, ref[0], xp))
    return result


def _linear_reference(volume, spec, vote=None):
    """The linear refinement's reference (:class:`~._linear.Reference`), the half spectrum
    of the reference volume's periodic component (its ``spec`` less the smooth component's),
    and the run's :class:`~._linear.WrapVote` (``boundary="auto"``: ``vote``, decided before
    the run, or a new one)."""
    return (Reference(centred(volume)), spec - smooth_spectrum(volume[None])[0],
            WrapVote() if vote is None else vote)


def _measure_chunk(vols, ref_spec, ref_norm, lin_ref, bounds, upsample, boundary,
                   vote_only=False):
    """The shifts, peaks, runners-up, FFT checks and constant flags (B,) of a chunk of
    volumes ``vols`` (B, Z, Y, X) (scaled, on the device) against the reference's spectrum
    ``ref_spec`` (and norm; ``lin_ref``: :func:`_linear_reference`, None for
    ``boundary="circular"``).  The shifts: (B, 3) circular ones; else (B, 2, 3), the linear
    refinement's and (``auto``) the circular one's, of which the stack takes one
    (:class:`~._linear.WrapVote`: once it is decided, only that one is measured).

    The integer peak and its runner-up (the confidence) come from the circular correlation,
    of the periodic components where the boundary is not circular (:mod:`._linear`; the
    peak reported is the volumes' own circular correlation at it, 1 for identical volumes);
    the FFT check compares the transform's value at the peak with the direct sum.
    ``vote_only``: the vote alone (:func:`decide_boundary`), None returned."""
    shape = vols.shape[1:]
    size = float(np.prod(shape))
    spec, norms = spectrum(vols, array_module_of(vols), norms=True)
    constant = norms == 0  # (nothing to correlate: NaN later)
    search = None
    if lin_ref is not None:  # (the periodic components' product: the seams left out)
        search = smooth_spectrum(vols)
        array_module_of(spec).subtract(spec, search, out=search)
        conj_product(lin_ref[1], search, out=search)
    conj_product(ref_spec.astype(spec.dtype, copy=False), spec, out=spec)  # (R * conj(M))
    product, search = spec, (spec if search is None else search)
    corr = correlate(search, shape, normalized=False)  # (the 1/n on the host)
    coarse, top, rest = bounded_peak(corr, bounds)
    top, rest = top / size, rest / size
    del corr
    direct = to_numpy(samples3d(search, shape, coarse, 1.0, 1, nyquist=True)).reshape(-1)
    verified = np.abs(direct - top) <= 1e-3 * np.maximum(np.abs(direct), 1e-30)
    scale = np.maximum(norms * ref_norm, 1e-30)
    if lin_ref is None:
        return refine3d(product, coarse, shape, upsample), top / scale, rest / scale, \
            verified, constant
    del search
    own = to_numpy(samples3d(product, shape, coarse, 1.0, 1, nyquist=True)).reshape(-1)
    peak = own / scale
    second = np.where(top > 0, rest / np.maximum(top, 1e-300), 1.0) * peak
    shifts = np.repeat(np.asarray(coarse, np.float64)[:, None], 2, axis=1)  # (B, 2, 3)
    ref, vote = lin_ref[0], lin_ref[2]
    live = np.flatnonzero(~constant)
    start = {}  # (where each volume's circular refinement starts)
    if boundary == "auto":  # (the vote first: the chunk then refined only the way it chose)
        for b in live:
            if vote.decided:
                break
            start[b] = circular_start(product[b:b + 1], shape, coarse[b], bounds)
            vote.add(ref, vols[b], product[b:b + 1], start[b])
    if vote_only:
        return None
    both = boundary == "auto" and not vote.decided  # (undecided: refined both ways)
    for b in live:
        one = product[b:b + 1]
        if boundary == "linear" or both or not vote.wraps:
            shifts[b, 0] = linear_refine(ref, vols[b], one, coarse[b], bounds,
                                         subvoxel=upsample > 1)[0]
        if boundary == "auto" and (both or vote.wraps):
            at = start[b] if b in start else circular_start(one, shape, coarse[b], bounds)
            shifts[b, 1] = refine3d(one, at.astype(np.float64)[None], shape, upsample)[0]
    return shifts, peak, second, verified, constant


def _subvoxel_note(boundary, upsample, wraps, vote):
    """The note's words on how the shifts were refined (``wraps``: circularly; ``vote``: the
    run's :class:`~._linear.WrapVote`, or None)."""
    how = (("integer shifts" if upsample <= 1 else f"subvoxel by the upsampled DFT at "
            f"{upsample:g}") + " (circular)" if wraps else
           ("integer shifts" if upsample <= 1
            else "subvoxel by Gauss-Newton steps from a quadratic fit")
           + " of ZNCC over the overlap (linear)")
    if boundary == "auto" and vote.ratios:
        how += (f"; boundary auto: {'wrap-around' if wraps else 'cropped'} volumes (their "
                f"wrapped part matches {float(np.median(vote.ratios)):.2f} of the overlap)")
    return how


def _patch_chunk(source, grid, options, xp):
    """Volumes a chunk of the patch pass holds (:func:`fitting_chunk`: the search windows of
    a volume's patches, its upload, float32 copy and smoothed copy (and the Gaussian's work
    area), beside the template's spectra)."""
    window = grid.n_patches * int(np.prod(grid.window))  # (a volume's search voxels)
    itemsize = np.dtype(source.data.dtype).itemsize
    return fitting_chunk(source.shape[0], PER_VOXEL_FIXED * window,
                         PER_WINDOW_VOXEL * window
                         + (12 + 2 * itemsize) * int(np.prod(source.shape[1:])),
                         max(1, min(MAX_CHUNK, CHUNK_VOXELS // window)), xp,
                         options.memory_limit, f"the {grid.n_patches} patches of a volume "
                         "need about {} MiB to register", "use fewer or smaller patches")


def _patch_pass(source, options, rigid, template, xp):
    """The patch pass of a piecewise-rigid run (:mod:`._piecewise`): ``(grid, field (T, gz,
    gy, gx, 3), peak (T, gz, gy, gx), low (T, gz, gy, gx), volumes a chunk)`` (NumPy), from
    the rigid shifts ``rigid`` (T, 3) and the reference volume ``template`` (scaled, on the
    device); the volumes read again a chunk at a time."""
    t = source.shape[0]
    grid = volume_grid(source.shape[1:], rigid, options)
    chunk = _patch_chunk(source, grid, options, xp)
    tspec, tnorm = template_spectra(template, grid)
    del template
    shifts, peak = np.empty((t, grid.n_patches, 3)), np.empty((t, grid.n_patches))
    border = np.empty((t, grid.n_patches), bool)
    with DeviceChunks(source.frames(), chunk, xp) as chunks:
        for start, data in chunks:
            stop = start + len(data)
            vols = source.read(start, stop, xp, data, scale="each")
            del data
            shifts[start:stop], peak[start:stop], border[start:stop] = measure_patches(
                vols, rigid[start:stop], grid, tspec, tnorm)
    low = low_patches(peak, border)
    field = np.where(low[..., None], rigid[:, None, :], shifts)  # (NaN rigid: NaN field)
    g = grid.grid
    return grid, field.reshape(t, *g, 3), peak.reshape(t, *g), low.reshape(t, *g), chunk
