"""Rigid 3-D registration of a (T, Z, Y, X) stack: :func:`align_volumes`.

How it works: the reference volume's spectrum (``rfftn`` over the last three axes) is made
once; then the volumes stream through in chunks sized to the memory at hand: each chunk's
spectra times the reference's conjugate, the inverse transform, the integer peak within the
``max_shift`` window, and the subvoxel peak by the 3-D upsampled DFT around it
(:mod:`._dft3`).  The same code runs on NumPy (SciPy's FFT) and CuPy (cuFFT).

Examples
--------
>>> import numpy as np
>>> from scipy import ndimage as ndi
>>> vol = ndi.gaussian_filter(np.random.default_rng(0).random((12, 20, 18)), 1.5)
>>> moved = np.fft.ifftn(ndi.fourier_shift(np.fft.fftn(vol), (1.5, -0.25, 2.0))).real
>>> result = align_volumes(np.stack([vol, moved]), max_shift=(3, 4, 4), device="cpu")
>>> (np.round(result.shifts, 2) + 0.0).tolist()  # (+ 0.0: no -0.0)
[[0.0, 0.0, 0.0], [-1.5, 0.25, -2.0]]
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import numpy as np

from ...backend import (DEVICES, compute_device, device_free_bytes, host_available_bytes,
                       to_numpy, xp_for)
from ...errors import InputError
from ..rigid import check_gpu_float32
from ...io import parse_axes, with_axes
from ...registration import DEFAULT_UPSAMPLE, MAX_UPSAMPLE
from ...streaming import DeviceChunks, parse_memory
from ._dft3 import bounded_peak, correlate, cross_spectra, refine3d, samples3d, spectrum
from ._prebuild import prebuild_volumes
from ._rows import item_sums
from ._result import VolumeResult
from ._source import open_volumes

#: bytes per voxel a volume of a chunk takes (float32 copy, half spectrum, correlation,
#: window copy, FFT work area), besides the uploads of the chunk and of the next (the input's
#: pixel type: :func:`plan_chunk`)
PER_VOXEL_CHUNK = 20
#: bytes per voxel held once (the reference spectrum, the mean reference, slack)
PER_VOXEL_FIXED = 12
#: share of the free memory a run plans to use
MEMORY_SHARE = 0.6
MAX_CHUNK = 64
#: voxels of a chunk at most: batches this large keep cuFFT busy, and smaller chunks let the
#: next one be read from the file while the device works (64x512x512 volumes: 8 a chunk)
CHUNK_VOXELS = 2 ** 27


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
        if isinstance(v, bool) or float(v) != int(v) or int(v) < 0:
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
class VolumeOptions:
    """Every option of one 3-D run (:func:`align_volumes`), checked and normalized once, when
    built: ``max_shift`` a 3-tuple (or None), ``voxel_size`` three floats (or None),
    ``upsample`` a float >= 1 (None: :data:`~xcorr_app.registration.DEFAULT_UPSAMPLE`),
    ``memory_limit`` bytes (or a size such as ``"2G"``), ``channel`` an int >= 0 (or None;
    the file's channel count: checked by its reader).  What runs below takes it as it is.

    >>> VolumeOptions(max_shift=3, upsample=None).max_shift
    (3, 3, 3)
    """

    reference: object = "first"
    max_shift: object = None
    voxel_size: object = None
    upsample: object = DEFAULT_UPSAMPLE
    device: str = "auto"
    memory_limit: object = None
    axes: object = None
    channel: object = None

    def __post_init__(self):
        put = functools.partial(object.__setattr__, self)
        ref = self.reference
        if not (ref in ("first", "mean") if isinstance(ref, str) else
                isinstance(ref, (int, np.integer)) and not isinstance(ref, bool)):
            raise InputError(f"reference {ref!r}: use 'first', 'mean' or a volume index")
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


def plan_chunk(shape, xp, memory_limit=None, itemsize=2):
    """How many volumes of ``shape`` (T, Z, Y, X) of ``itemsize`` bytes a voxel one chunk
    holds; InputError, with the figures, where not even one fits beside the reference."""
    voxels = int(np.prod(shape[1:]))
    per = PER_VOXEL_CHUNK + 2 * int(itemsize)
    return fitting_chunk(shape[0], PER_VOXEL_FIXED * voxels, per * voxels,
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


def reference_volume(source, reference, device="auto", chunk=8):
    """The reference volume of a :class:`~._source.Volumes` (``"first"``, ``"mean"`` or an
    index) on its device: ``(volume, its description, the device)``."""
    dev = compute_device(source.data, device=device)
    return (*_reference(source, reference, xp_for(dev), chunk), dev)


def _reference(source, reference, xp, chunk):
    t = source.shape[0]
    if isinstance(reference, str):
        if reference == "first":
            return source.read(0, 1, xp, scale="each")[0], "the first volume"
        if reference == "mean":
            return _mean_volume(source, xp, chunk), f"the mean of the {t} volumes"
    elif isinstance(reference, (int, np.integer)) and not isinstance(reference, bool):
        if not -t <= int(reference) < t:
            raise InputError(f"reference {reference} is outside the stack's {t} volumes")
        i = int(reference) % t
        return source.read(i, i + 1, xp, scale="each")[0], f"volume {i}"
    raise InputError(f"reference {reference!r}: use 'first', 'mean' or a volume index")


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


def align_volumes(stack, reference="first", max_shift=None, voxel_size=None,
                  upsample=DEFAULT_UPSAMPLE, device="auto", memory_limit=None, *, axes=None,
                  channel=None, options=None):
    """Rigid 3-D shifts of each volume of a (T, Z, Y, X) stack onto a reference volume.

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
        Subvoxel refinement: the correlation sampled every ``1 / upsample`` voxel around the
        peak, then a parabola through the best sample; 1: integer shifts.
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
    given = dict(reference=reference, max_shift=max_shift, voxel_size=voxel_size,
                 upsample=upsample, device=device, memory_limit=memory_limit, axes=axes,
                 channel=channel)
    if options is None:
        options = VolumeOptions(**given)
    elif any(given[f.name] is not f.default for f in dataclasses.fields(VolumeOptions)):
        raise InputError("give the run's options either as options= or as keywords, not both")
    source = open_volumes(with_axes(stack, options.axes), channel=options.channel)
    bounds, upsample, reference = options.max_shift, options.upsample, options.reference
    voxel_size, memory_limit = options.voxel_size, options.memory_limit
    dev = compute_device(source.data, device=options.device)
    if dev == "gpu" and np.dtype(source.data.dtype) == np.float32:
        check_gpu_float32(source.data[0], "the first volume")
    xp = xp_for(dev)
    if xp is not np:  # (a machine's first run: the later stages' kernels built meanwhile)
        prebuild_volumes(bounds, upsample, device=xp.cuda.Device().id)
    t, shape = source.shape[0], source.shape[1:]
    chunk = plan_chunk(source.shape, xp, memory_limit, np.dtype(source.data.dtype).itemsize)
    size = float(np.prod(shape))
    shifts, peak = np.zeros((t, 3)), np.zeros(t)
    second, verified, constant = np.zeros(t), np.zeros(t, bool), np.zeros(t, bool)
    with contextlib.ExitStack() as held:
        # read ahead (on the GPU copied on two streams) while the device works on the chunk
        # before; the reference's spectrum made at the first chunk (the mean's: a pass before)
        late = isinstance(reference, str) and reference == "mean"
        first = isinstance(reference, str) and reference == "first"
        ref_spec = ref_norm = ref_name = None
        if late:  # (the mean: a pass over the volumes itself, before theirs)
            ref_spec, ref_norm, ref_name = _reference_spectrum(
                *_reference(source, reference, xp, chunk), xp)
        chunks = held.enter_context(DeviceChunks(source.frames(), chunk, xp))
        for start, data in chunks:
            if ref_spec is None:  # (volume 0 from the first chunk: no read and copy of its own)
                ref_spec, ref_norm, ref_name = _reference_spectrum(
                    *((source.read(0, 1, xp, data[:1], scale="each")[0], "the first volume")
                      if first else _reference(source, reference, xp, chunk)), xp)
            stop = start + len(data)
            product, norms = cross_spectra(
                ref_spec, source.read(start, stop, xp, data, scale="each"), norms=True)
            constant[start:stop] = norms == 0  # (nothing to correlate: NaN below)
            del data
            corr = correlate(product, shape, normalized=False)  # (the 1/n on the host)
            coarse, top, rest = bounded_peak(corr, bounds)
            top, rest = top / size, rest / size
            del corr
            direct = to_numpy(samples3d(product, shape, coarse, 1.0, 1, nyquist=True)).reshape(-1)
            verified[start:stop] = np.abs(direct - top) <= 1e-3 * np.maximum(np.abs(direct),
                                                                              1e-30)
            shifts[start:stop] = refine3d(product, coarse, shape, upsample)
            scale = np.maximum(norms * ref_norm, 1e-30)
            peak[start:stop], second[start:stop] = top / scale, rest / scale
            del product
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
             f", subvoxel by the upsampled DFT at {upsample:g}"]
    if at_bound.any():
        notes.append(f"{int(at_bound.sum())} volume(s) peak on the max_shift border: the true "
                     "shift may lie beyond it")
    if constant.any():
        notes.append(f"{int(constant.sum())} constant volume(s): shift undefined (NaN), "
                     "confidence 0, not verified")
    if not (verified | constant).all():
        notes.append(f"{int((~verified & ~constant).sum())} volume(s) whose FFT peak the direct "
                     "sum does not confirm")
    return VolumeResult(shifts, peak, confidence, at_bound, verified, voxel_size, notes, dev)
