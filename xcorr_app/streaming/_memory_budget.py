"""What one frame of an alignment run costs in memory, and how many frames a step may hold:
``--max-memory``, the free memory of the device, and the automatic caps.

:func:`frame_need` is the honest per-frame figure, per device.  Its terms, per frame of
``H x W`` pixels (``P = H W``) with a correlation surface of ``Ho x Wo`` shifts:

* **read-ahead ring** (host): ``(READ_AHEAD + 1)`` chunk buffers of the input pixel type;
* **upload** (GPU only): the chunk's copy on the device, on each of the two CUDA streams;
* **preparation**: the float32 working copies (the conversion, the mean-subtracted raw frame,
  the prefiltered and windowed frame, the prefilter's temporaries):
  :data:`PREPARE_BYTES_PER_PIXEL` per pixel, always of the whole frame;
* **correlation**: a bounded search's correlation sums (the CPU's zero-padded FFT, the GPU's
  kernels' inputs), :data:`CORRELATION_BYTES_PER_PIXEL` per pixel of the frame, or of the
  rows a band of a tiled search reads (``band_rows + 2 sy``); an unbounded search's
  zero-padded FFT of the linear correlation, :data:`UNBOUNDED_FFT_BYTES_PER_PIXEL`;
* **normalization**: the float64 squares the ZNCC's rectangle sums read,
  :data:`ZNCC_BYTES_PER_PIXEL`, and per shift of the surface the float32 surface with its
  float64 normalization temporaries and peak masks, :data:`BYTES_PER_OUTPUT`;
* **verification** (``verify``): the FFT reference's spectra of the whole frame (its periodic
  component, the cross-power spectrum and its inverse), :data:`VERIFY_BYTES_PER_PIXEL`.

On the CPU every term is host memory.  The figures were measured on the CPU (peak resident
memory of one frame of 1024x1024 and 2048x2048: 48 B/px bounded, 56 with the verification,
126 and 134 unbounded) and rounded up: the estimate is a little generous.

:func:`plan_memory` checks one frame up front against ``--max-memory`` and the free memory of
the chosen device (and of the host), sizes the chunk, switches a bounded search whose whole
frame does not fit to bands of rows (:mod:`xcorr_app.registration._bands`), and otherwise
refuses with the figure and what helps.

Examples
--------
>>> parse_memory("1.5G"), parse_memory("512M"), parse_memory("4096")
(1610612736, 536870912, 4096)
>>> plan_memory((256, 256), 2, max_shift=(16, 16), budget=parse_memory("1G")).chunk_frames
64
>>> plan_memory((4000, 4000), 2, max_shift=(16, 16), verify=False,
...             budget=parse_memory("600M")).band_rows is not None
True
"""

from __future__ import annotations

import dataclasses
import math
import re

from ..errors import InputError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
#: chunks read ahead of the one being computed (the host ring holds one more)
READ_AHEAD = 2
#: device copies of a chunk's input on the GPU (one per CUDA stream of the chunk loop)
UPLOAD_COPIES = 2
#: bytes per frame pixel of the float32 working copies (conversion, raw, prefiltered, windowed,
#: the prefilter's temporaries)
PREPARE_BYTES_PER_PIXEL = 20
#: bytes per pixel a bounded search's correlation reads and makes (zero-padded FFT inputs and
#: spectra on the CPU, the kernels' inputs on the GPU); per row of a band in tiled searches
CORRELATION_BYTES_PER_PIXEL = 32
#: bytes per frame pixel of an unbounded search's zero-padded FFT (about 2H x 2W: the padded
#: inputs, their half spectra, the product and its inverse)
UNBOUNDED_FFT_BYTES_PER_PIXEL = 48
#: bytes per frame pixel of the float64 squares the ZNCC's rectangle sums read (the GPU keeps
#: two float64 tables instead, 16 bytes a pixel without a bound, and their row sums by strip,
#: 0.5, while they are made: covered by BYTES_PER_OUTPUT, whose float64 normalization
#: temporaries the GPU does not make)
ZNCC_BYTES_PER_PIXEL = 8
#: bytes per correlation output: the float32 surface, its float64 normalization temporaries
#: and the local-maximum masks of the confidence measure
BYTES_PER_OUTPUT = 64
#: bytes per frame pixel of the FFT verification (complex64 spectra of the whole frame: the
#: periodic component, the cross-power spectrum, its inverse, a temporary)
VERIFY_BYTES_PER_PIXEL = 32
#: share of the free device memory the automatic chunk cap uses on the GPU
AUTO_DEVICE_SHARE = 0.5
#: share of the host's available memory the automatic chunk cap uses on the CPU
AUTO_HOST_SHARE = 0.5
#: the most bytes the automatic chunk cap gives one chunk on the CPU (without --max-memory);
#: the chunk is cut into one slice per thread (:mod:`xcorr_app.streaming._threads`), so on
#: many cores large frames use as many threads as frames fit
CPU_AUTO_BUDGET = 1 << 30
#: rows per band of a tiled search, at most (or 32 bound rows where more): larger bands save
#: little (each band reads ``2 sy`` rows more than it measures) and hold more memory
BAND_ROWS = 1024
#: the bound the refusal tries when it considers advising ``--max-shift``
ADVISED_SHIFT = 32


def parse_memory(spec, name="max_memory") -> int:
    """``"800M"``, ``"2G"``, ``"1.5G"``, ``"4096"`` (bytes; K, M, G, T are powers of 1024);
    ``name``: the option the messages name.

    >>> parse_memory("lots")
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: max_memory 'lots' is not a memory size: use e.g. 512M, 2G or 1.5G
    """
    if isinstance(spec, bool):
        raise InputError(f"{name} must be a memory size, got {spec!r}")
    if isinstance(spec, (int, float)):
        if not math.isfinite(spec):  # (NaN and infinity are no size: int() would raise)
            raise InputError(f"{name} must be a positive memory size, got {spec!r}")
        value = int(spec)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)i?B?\s*", str(spec), re.IGNORECASE)
        if m is None:
            raise InputError(f"{name} {spec!r} is not a memory size: use e.g. 512M, 2G or 1.5G")
        value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value <= 0:
        raise InputError(f"{name} must be a positive memory size, got {spec!r}")
    return value


def human(n: int) -> str:
    """``1536 -> "1.5 KiB"``, ``1000 -> "1000 B"``, ``(1 << 20) - 1 -> "1024 KiB"``."""
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if n >= 100 else f"{n:.3g} {unit}"


@dataclasses.dataclass(frozen=True)
class FrameNeed:
    """Bytes one frame of a chunk needs: on the host and on the GPU (0 on the CPU, where every
    term is host memory)."""

    host: int
    device: int

    @property
    def total(self) -> int:
        return self.host + self.device


def _surface_shape(frame_shape, max_shift):
    h, w = frame_shape
    sy, sx = (h // 2, w // 2) if max_shift is None else max_shift
    return 2 * sy + 1, 2 * sx + 1


def frame_need(frame_shape, itemsize, *, max_shift=None, verify=True, device="cpu",
               band_rows=None) -> FrameNeed:
    """The memory one frame needs (the terms of the module docstring).

    Parameters
    ----------
    frame_shape : (H, W)
    itemsize : int
        Bytes per input pixel.
    max_shift : (sy, sx), optional
        The search bound; ``None``: unbounded (half the frame, by FFT).
    verify : bool
        The FFT verification runs.
    device : {"cpu", "gpu"}
    band_rows : int, optional
        Rows of the moving frame per band of a tiled bounded search (whole frames without).

    Examples
    --------
    >>> n = frame_need((100, 100), 2, max_shift=(4, 4), verify=False)
    >>> n.device, n.host == 10_000 * (3 * 2 + 20 + 32 + 8) + 81 * 64
    (0, True)
    """
    h, w = frame_shape
    pixels = h * w
    ho, wo = _surface_shape(frame_shape, max_shift)
    ring = (READ_AHEAD + 1) * itemsize * pixels
    if max_shift is None:
        correlation = UNBOUNDED_FFT_BYTES_PER_PIXEL * pixels
    else:
        rows = h if band_rows is None else min(h, band_rows) + 2 * max_shift[0]
        correlation = CORRELATION_BYTES_PER_PIXEL * rows * w
    work = (PREPARE_BYTES_PER_PIXEL + ZNCC_BYTES_PER_PIXEL
            + (VERIFY_BYTES_PER_PIXEL if verify else 0)) * pixels \
        + correlation + BYTES_PER_OUTPUT * ho * wo
    if device == "gpu":
        return FrameNeed(ring, work + UPLOAD_COPIES * itemsize * pixels)
    return FrameNeed(ring + work, 0)


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """How a run holds its frames: ``chunk_frames`` per step, whole frames
    (``band_rows=None``) or bands of ``band_rows`` rows of one frame at a time; ``need``: one
    frame's bytes as planned."""

    chunk_frames: int
    band_rows: int | None
    need: FrameNeed


def _limits(device, budget, device_free, host_free):
    """``[(name, bytes, which part of a FrameNeed it bounds)]`` of the limits that apply."""
    out = []
    if budget is not None:
        out.append(("max-memory", int(budget), "total"))
    if device == "gpu" and device_free is not None:
        out.append(("gpu", int(device_free), "device"))
    if host_free is not None:
        out.append(("host", int(host_free), "host"))
    return out


def _broken(need, limits):
    """The first limit ``need`` exceeds, or None."""
    for limit in limits:
        if getattr(need, limit[2]) > limit[1]:
            return limit
    return None


def _fitting(frame_shape, itemsize, max_shift, normalization, verify, device, limits):
    """``(band_rows, need)`` of the way one frame fits ``limits``: whole, else the largest
    band up to :data:`BAND_ROWS` that fits (bounded searches, not phase); None when nothing
    fits."""
    kw = dict(max_shift=max_shift, verify=verify, device=device)
    need = frame_need(frame_shape, itemsize, **kw)
    if _broken(need, limits) is None:
        return None, need
    if max_shift is None or normalization == "phase":
        return None
    # the largest band that fits, by bisection, up to BAND_ROWS
    lo, hi = 1, min(frame_shape[0] - 1, max(BAND_ROWS, 32 * max_shift[0]))
    if hi < 1 or _broken(frame_need(frame_shape, itemsize, band_rows=lo, **kw), limits):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _broken(frame_need(frame_shape, itemsize, band_rows=mid, **kw), limits):
            hi = mid - 1
        else:
            lo = mid
    return lo, frame_need(frame_shape, itemsize, band_rows=lo, **kw)


def _least(frame_shape, itemsize, max_shift, normalization, verify, device) -> FrameNeed:
    """The smallest need of one frame with these options (one-row bands where they apply)."""
    kw = dict(max_shift=max_shift, verify=verify, device=device)
    whole = frame_need(frame_shape, itemsize, **kw)
    if max_shift is None or normalization == "phase":
        return whole
    return min(whole, frame_need(frame_shape, itemsize, band_rows=1, **kw),
               key=lambda need: need.total)


def refusal(frame_shape, itemsize, *, max_shift, normalization, verify, device, budget,
            device_free, host_free) -> str:
    """The one-line message of a frame that does not fit: the figure needed, the figure
    available, and what helps (never an option already given)."""
    h, w = frame_shape
    args = (max_shift, normalization, verify)
    limits = _limits(device, budget, device_free, host_free)
    least = _least(frame_shape, itemsize, *args, device)
    name, avail, part = _broken(least, limits)
    figure = getattr(least, part)
    text = {"max-memory": f"max_memory {human(avail)} is too small for frames of {h}x{w}: "
                          f"one frame needs at least {human(figure)}",
            "gpu": f"frames of {h}x{w} do not fit on the GPU: one frame needs at least "
                   f"{human(figure)} there, and {human(avail)} is free",
            "host": f"frames of {h}x{w} do not fit in memory: one frame needs at least "
                    f"{human(figure)}, and {human(avail)} is available"}[name]
    helps = []

    def fits(**change):
        a = dict(max_shift=max_shift, normalization=normalization, verify=verify,
                 device=device, limits=limits)
        a.update(change)
        return _fitting(frame_shape, itemsize, a["max_shift"], a["normalization"], a["verify"],
                        a["device"], a["limits"]) is not None

    if max_shift is None and normalization != "phase":
        n = min(ADVISED_SHIFT, h // 2, w // 2)
        bounded = _least(frame_shape, itemsize, (n, n), normalization, verify, device)
        helps.append(f"max_shift=N (bound the search to the largest drift expected; with N = "
                     f"{n}: {human(getattr(bounded, part))})")
    if verify:
        lean = _least(frame_shape, itemsize, max_shift, normalization, False, device)
        helps.append(f"verify=False ({human(getattr(lean, part))})")
    if device == "gpu" and name == "gpu" \
            and fits(device="cpu", limits=_limits("cpu", budget, None, host_free)):
        helps.append("device='cpu' (the host has the memory)")
    if name == "max-memory" and fits(limits=[lim for lim in limits if lim[0] != name]):
        helps.append(f"max_memory={human(figure)} or more")
    if not helps:
        helps.append("a machine with more memory, or smaller frames (crop or bin them)")
    return f"{text}; try {', or '.join(helps)}"


#: the chunk of a run that names none (:func:`auto_chunk_frames`): 64 frames, and on the GPU
#: as many small frames as 256 MiB of float32 pixels hold, at most 1024: each chunk costs the
#: host a fixed time of launches and syncs, which small frames do not cover
#: (docs/how-align-works.md, measurements)
DEFAULT_CHUNK = 64
AUTO_CHUNK_BYTES = 256 << 20
MAX_AUTO_CHUNK = 1024


def auto_chunk_frames(frame_shape, device) -> int:
    """Frames per chunk of a run on ``device`` ("cpu" or "gpu") that names none.

    >>> auto_chunk_frames((512, 512), "gpu"), auto_chunk_frames((2048, 2048), "gpu")
    (256, 64)
    >>> auto_chunk_frames((64, 64), "gpu"), auto_chunk_frames((512, 512), "cpu")
    (1024, 64)
    """
    if device != "gpu":
        return DEFAULT_CHUNK
    frame = 4 * math.prod(int(s) for s in frame_shape)
    return int(min(MAX_AUTO_CHUNK, max(DEFAULT_CHUNK, AUTO_CHUNK_BYTES // max(frame, 1))))


def check_bound(frame_shape, max_shift) -> None:
    """InputError where the search bound ``(sy, sx)`` reaches past the frames (a shift of more
    than their height or width leaves no overlap; its surface would be sized all the same), or
    allows no shift at all (0 on both axes: every frame would measure 0, confident; 0 on one
    axis holds that axis).

    >>> check_bound((120, 160), (0, 0))
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: max_shift 0 allows no shift on either axis: nothing would be measured; give the largest shift to search (px), or 0 on one axis alone (0,N) to hold that axis

    >>> check_bound((120, 160), (10**9, 10**9))
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: max_shift 1000000000 reaches past frames of 120x160: a shift beyond 120 rows or 160 columns leaves no overlap; use at most 120,160
    """
    h, w = frame_shape
    if max_shift is not None and max_shift[0] == max_shift[1] == 0:
        raise InputError("max_shift 0 allows no shift on either axis: nothing would be "
                         "measured; give the largest shift to search (px), or 0 on one axis "
                         "alone (0,N) to hold that axis")
    if max_shift is not None and (max_shift[0] > h or max_shift[1] > w):
        raise InputError(f"max_shift {_pair(max_shift)} reaches past frames of {h}x{w}: a shift "
                         f"beyond {h} rows or {w} columns leaves no overlap; use at most "
                         f"{_pair((min(max_shift[0], h), min(max_shift[1], w)))}")


def _pair(shift) -> str:
    """``(4, 4) -> "4"``, ``(2, 5) -> "2,5"`` (as ``--max-shift`` takes them)."""
    return str(shift[0]) if shift[0] == shift[1] else f"{shift[0]},{shift[1]}"


def plan_memory(frame_shape, itemsize, *, max_shift=None, normalization="zncc", verify=True,
                device="cpu", budget=None, limit=64, device_free=None,
                host_free=None) -> MemoryPlan:
    """Check one frame up front and plan the run's memory.

    Parameters
    ----------
    frame_shape, itemsize, max_shift, verify, device
        As :func:`frame_need`; ``max_shift`` the bound (None: unbounded).
    normalization : str
        Phase correlation is never tiled.
    budget : int, optional
        ``--max-memory`` in bytes (host and device together).
    limit : int
        The most frames per chunk.
    device_free : int, optional
        Free memory of the GPU (:func:`xcorr_app.backend.device_free_bytes`).
    host_free : int, optional
        The host's available memory (:func:`xcorr_app.backend.host_available_bytes`).

    Returns
    -------
    MemoryPlan
        Chunks within ``budget``, within :data:`AUTO_DEVICE_SHARE` of ``device_free`` on the
        GPU, and on the CPU without ``budget`` within :data:`AUTO_HOST_SHARE` of ``host_free``
        and :data:`CPU_AUTO_BUDGET`; one frame at a time in bands when only bands fit.

    Raises
    ------
    InputError
        When one frame does not fit (:func:`refusal` says what helps).  ``max_shift`` within
        the frame is the caller's to check, once a run (:func:`check_bound`).
    """
    limits = _limits(device, budget, device_free, host_free)
    found = _fitting(frame_shape, itemsize, max_shift, normalization, verify, device, limits)
    if found is None:
        raise InputError(refusal(frame_shape, itemsize, max_shift=max_shift,
                                 normalization=normalization, verify=verify, device=device,
                                 budget=budget, device_free=device_free, host_free=host_free))
    band_rows, need = found
    if band_rows is not None:
        return MemoryPlan(1, band_rows, need)
    n = int(limit)
    if budget is not None:
        n = min(n, budget // need.total)
    if device == "gpu" and device_free is not None:
        n = min(n, int(AUTO_DEVICE_SHARE * device_free // max(1, need.device)))
    if device == "cpu":
        from ._threads import cpu_threads

        threads = cpu_threads()
        if budget is None:
            n = min(n, CPU_AUTO_BUDGET // need.total)
            if host_free is not None:
                n = min(n, int(AUTO_HOST_SHARE * host_free // need.total))
        if n >= threads:  # every thread gets as many frames (a chunk waits for its slowest)
            n -= n % threads
    return MemoryPlan(max(1, n), None, need)


def host_free_bytes():
    """Bytes of host memory this process may still take: the available memory
    (:func:`xcorr_app.backend.host_available_bytes`), and under an address-space limit
    (``ulimit -v``) at most what the limit leaves; None where neither is known.

    >>> n = host_free_bytes()
    >>> n is None or n >= 0
    True
    """
    import os

    from .. import backend

    free = backend.host_available_bytes()
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft == resource.RLIM_INFINITY:
            return free
        with open("/proc/self/statm") as f:  # (the address space this process maps now)
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError):
        return free
    left = max(0, soft - mapped)
    return left if free is None else min(free, left)


def check_frame_memory(frame_shape, itemsize, *, max_shift=None, normalization="zncc",
                       verify=True, devices=("cpu",), budget=None) -> None:
    """Refuse frames one of which fits none of ``devices`` ("cpu", "gpu"; none: nothing
    checked), before any frame is read: :func:`plan_memory`'s check of one frame
    against ``budget`` and the memory free now (:func:`host_free_bytes`; a run reads a few
    whole frames for its automatic choices before its own check).

    Raises
    ------
    InputError
        :func:`refusal`'s line for the first of ``devices``.

    Examples
    --------
    >>> check_frame_memory((64, 64), 2)
    >>> check_frame_memory((40000, 40000), 2, budget=parse_memory("1G"))
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: max_memory 1 GiB is too small for frames of 40000x40000: one frame needs at least 265 GiB; try max_shift=N (bound the search to the largest drift expected; with N = 32: 98.4 GiB), or verify=False (218 GiB)
    """
    from .. import backend

    host_free = host_free_bytes()
    first = None
    for device in devices:
        if device == "gpu" and not backend.gpu_available():
            continue  # (a GPU not usable here: the run says so itself)
        device_free = backend.device_free_bytes(backend.xp_for(device)) \
            if device == "gpu" else None
        try:
            plan_memory(frame_shape, itemsize, max_shift=max_shift, normalization=normalization,
                        verify=verify, device=device, budget=budget, limit=1,
                        device_free=device_free, host_free=host_free)
            return
        except InputError as exc:
            first = first or exc
    if first is not None:
        raise first
