"""The ``xcorr bench align`` benchmark: end-to-end alignment of a TIFF file against its peers.

One uint16 stack (512 frames of 2048x2048, 4 GiB, unless told otherwise; ``--quick``: 32 frames
of 512x512) is made of a smooth random scene that drifts by a known random walk (integer and
subpixel steps, within +-12 px of the first frame) under Poisson noise (:class:`SyntheticStack`),
and written uncompressed and contiguous (memory-mappable) to a TIFF file on local disk.  The
file was just written, so it is in the page cache: every row reads it from memory, none from
the disk.  Then, timed by wall clock (``time.perf_counter``) over the whole file, each after an
untimed warm-up (kernel compilation, the planner's measurements, cuFFT plans, imports):

* **tifffile.imread**: ``tifffile.imread(path)``, the whole file into a new array,
* **tifffile.memmap**: ``tifffile.memmap(path)`` copied out chunk by chunk into one reused
  buffer (the way :mod:`xcorr_app.io._reader` reads);
  the faster of these two is the *plain read* baseline,
* **xcorr align --max-shift 16**, **xcorr align (unbounded)** and **xcorr align --max-shift 16
  --no-verify**: :func:`xcorr_app.align` on the path, in process, ``device="gpu"``, default
  settings otherwise (``verify=True`` includes the FFT reference measurement of every frame),
* **per-pair CuPy FFT loop**: what a loop over cuCIM's ``phase_cross_correlation(reference,
  frame)`` does, one pair at a time (:func:`cupy_pair_shift`): read the frame, upload it, FFT the
  reference and the frame, normalized cross-power spectrum, inverse FFT, argmax, shift to the
  host; ``upsample_factor=1``,
* **skimage (CPU)**: ``skimage.registration.phase_cross_correlation(reference, frame)`` on the
  first 32 frames only.

Each row gives seconds, frames/s, GB/s (1e9 bytes/s of the uint16 pixels), its share of the plain
read throughput, its speed-up over the per-pair loop, and the RMS error (px, Euclidean) of the
shifts it measured against the known drift.  The issue's targets, checked for the two
``xcorr align`` rows with verification: at least :data:`TARGET_VS_READ` of the plain read
throughput and at least :data:`TARGET_VS_LOOP` times the per-pair loop.

Run it as ``xcorr bench align [--quick] [--frames N] [--size HxW] [--workdir DIR] [--keep]``
(in Python: :func:`main`; ``repeat=N`` times every row N times and reports the median).

Examples
--------
>>> shifts = drift_walk(100, max_drift=12.0, seed=0)
>>> shifts.shape, shifts[0].tolist(), bool(abs(shifts).max() <= 12.0)
((100, 2), [0.0, 0.0], True)
>>> stack = SyntheticStack(3, (64, 80), seed=1)
>>> frames = stack.frames(0, 3)
>>> frames.shape, frames.dtype.name, stack.nbytes
((3, 64, 80), 'uint16', 30720)
>>> rms_error([[0.0, 0.0], [1.0, 2.0]], [[0.0, 0.0], [1.0, 2.0]])
0.0
"""

from __future__ import annotations

import concurrent.futures
import datetime
import importlib
import inspect
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from ._filter import parse_size
from ._xcorr import _cell, _free_gpu_memory, _reason, _versions
from ..errors import XcorrError

#: the full run and the ``--quick`` smoke run: (frames, height, width)
DEFAULT_SHAPE = (512, 2048, 2048)
QUICK_SHAPE = (32, 512, 512)
#: the drift of the synthetic stack: |shift| <= MAX_DRIFT px on each axis, relative to frame 0
MAX_DRIFT = 12.0
#: standard deviation (px) of one step of the random walk, per axis
DRIFT_STEP = 1.0
#: smoothness (gaussian sigma, px) of the random scene, and its grey-value range; a smoother
#: scene has too little power at high frequencies for phase correlation (the peers and the FFT
#: reference lock onto the frame edges)
SCENE_SIGMA = 1.0
SCENE_RANGE = (0.0, 60000.0)
#: smallest frame side: the drift must leave most of the frame overlapping
MIN_SIDE = 64
#: the bound of the bounded ``xcorr align`` rows (the issue's ``--max-shift 16``)
MAX_SHIFT = 16
#: frames of the scikit-image row (CPU, slow)
SKIMAGE_FRAMES = 32
#: frames per chunk of the chunked read, and of the synthetic stack's generation
READ_CHUNK = 64
WRITE_CHUNK = 16
#: frames of the warm-up of the per-pair loops and of the read rows
WARMUP_FRAMES = 4
#: RMS error (px) against the known drift above which an ``xcorr align`` row is INACCURATE
ACCURACY_PX = 0.25
#: the issue's targets for the end-to-end rows
TARGET_VS_READ = 0.80
TARGET_VS_LOOP = 5.0
#: free disk space kept beyond the file (bytes)
DISK_MARGIN = 256 << 20

READ_IMREAD = "tifffile.imread (whole file)"
READ_MEMMAP = f"tifffile.memmap, copied in {READ_CHUNK}-frame chunks"
ALIGN_BOUNDED = f"xcorr align --max-shift {MAX_SHIFT}"
ALIGN_FULL = "xcorr align (unbounded)"
ALIGN_NO_VERIFY = f"xcorr align --max-shift {MAX_SHIFT} --no-verify"
LOOP = "per-pair CuPy FFT loop"
SKIMAGE = "skimage phase_cross_correlation (CPU)"
#: the rows the issue's targets apply to
TARGET_ROWS = (ALIGN_BOUNDED, ALIGN_FULL)
#: ``--gpus``: the unbounded run over several GPUs against one GPU and against parallel reads
TARGET_MULTI_SPEEDUP = 1.7
TARGET_MULTI_VS_READ = 0.90
#: ``align()`` keyword arguments of the three xcorr rows
ALIGN_ROWS = {ALIGN_BOUNDED: {"max_shift": MAX_SHIFT},
              ALIGN_FULL: {"max_shift": None},
              ALIGN_NO_VERIFY: {"max_shift": MAX_SHIFT, "verify": False}}


# ------------------------------------------------------------------------------ the stack

def drift_walk(n_frames, max_drift=MAX_DRIFT, step=DRIFT_STEP, seed=0) -> np.ndarray:
    """A seeded random walk of ``(dy, dx)`` offsets, reflected into ``[-max_drift, max_drift]``.

    Row 0 is ``(0, 0)``; each later row adds a normal step of standard deviation ``step`` per
    axis.  Returns ``(n_frames, 2)`` float64.
    """
    rng = np.random.default_rng([seed, 0])
    steps = rng.normal(0.0, step, (max(n_frames - 1, 0), 2))
    out = np.zeros((n_frames, 2))
    for i, s in enumerate(steps, start=1):
        o = out[i - 1] + s
        o = np.where(o > max_drift, 2 * max_drift - o, o)
        out[i] = np.clip(np.where(o < -max_drift, -2 * max_drift - o, o), -max_drift, max_drift)
    return out


def make_scene(shape, sigma=SCENE_SIGMA, value_range=SCENE_RANGE, seed=0) -> np.ndarray:
    """A smooth random float32 image of ``shape``: gaussian-filtered uniform noise, scaled to
    ``value_range``."""
    from scipy import ndimage as ndi

    rng = np.random.default_rng([seed, 1])
    img = ndi.gaussian_filter(rng.random(shape, dtype=np.float32), sigma)
    lo, hi = float(img.min()), float(img.max())
    img -= lo
    img *= (value_range[1] - value_range[0]) / max(hi - lo, 1e-12)
    img += value_range[0]
    return img


class SyntheticStack:
    """A uint16 stack drifting by a known random walk over a smooth scene, made frame by frame.

    Frame ``i`` is the window of the (larger) scene at offset :attr:`shifts` ``[i]`` from the
    window of frame 0 (bilinear interpolation for the subpixel part), plus Poisson noise
    (its normal approximation, ``sqrt(value)`` standard deviation, seeded per frame).  So frame
    ``i`` shows the content of frame 0 moved by ``-shifts[i]``, and ``shifts[i]`` is the shift to
    *apply* to frame ``i`` to align it with frame 0: what ``xcorr_app.align`` and
    ``skimage.registration.phase_cross_correlation(frame0, frame_i)`` return.

    Every frame depends on ``seed`` and its index only, so any chunking gives the same stack.

    Parameters
    ----------
    n_frames : int
    shape : (int, int)
        ``(H, W)`` of a frame.
    seed : int
    max_drift, step : float
        Of :func:`drift_walk`.
    noise : bool
        Add the Poisson noise.
    """

    def __init__(self, n_frames, shape, seed=0, max_drift=MAX_DRIFT, step=DRIFT_STEP,
                 noise=True):
        self.n_frames = int(n_frames)
        self.shape = (int(shape[0]), int(shape[1]))
        self.seed, self.noise = seed, noise
        self.shifts = drift_walk(self.n_frames, max_drift, step, seed)
        self.pad = int(math.ceil(max_drift)) + 1
        h, w = self.shape
        self.scene = make_scene((h + 2 * self.pad + 1, w + 2 * self.pad + 1), seed=seed)

    @property
    def nbytes(self) -> int:
        """Bytes of the uint16 pixels of the whole stack."""
        return self.n_frames * self.shape[0] * self.shape[1] * 2

    def frame(self, i) -> np.ndarray:
        """Frame ``i``, ``(H, W)`` uint16."""
        h, w = self.shape
        oy, ox = self.pad + self.shifts[i]
        iy, ix = int(math.floor(oy)), int(math.floor(ox))
        fy, fx = np.float32(oy - iy), np.float32(ox - ix)
        a = self.scene[iy:iy + h + 1, ix:ix + w + 1]
        t = a[:, 1:] - a[:, :-1]  # bilinear: along x, then along y
        t *= fx
        t += a[:, :-1]
        f = t[1:] - t[:-1]
        f *= fy
        f += t[:-1]
        if self.noise:
            rng = np.random.default_rng([self.seed, 2, int(i)])
            n = rng.standard_normal(self.shape, dtype=np.float32)
            n *= np.sqrt(f)
            f += n
        np.clip(f, 0, 65535, out=f)
        return f.astype(np.uint16)

    def frames(self, start, stop, workers=1) -> np.ndarray:
        """Frames ``start`` to ``stop - 1``, ``(stop - start, H, W)`` uint16, made by ``workers``
        threads (NumPy releases the GIL in its loops)."""
        out = np.empty((stop - start, *self.shape), np.uint16)
        if workers <= 1 or stop - start <= 1:
            for i in range(start, stop):
                out[i - start] = self.frame(i)
            return out
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for k, f in enumerate(pool.map(self.frame, range(start, stop))):
                out[k] = f
        return out

    def write(self, path, chunk_frames=WRITE_CHUNK, workers=None) -> None:
        """Write the stack to the TIFF file ``path`` chunk by chunk (uncompressed, contiguous,
        BigTIFF above 4 GiB: tifffile can memory-map it); never more than two chunks in memory."""
        from ..io._writer import TiffStackWriter

        workers = default_workers() if workers is None else workers
        with TiffStackWriter(path, self.shape, np.uint16, self.n_frames, imagej=False) as w, \
                concurrent.futures.ThreadPoolExecutor(1) as pool:
            pending = None  # the next chunk is made while this one is written
            for start in range(0, self.n_frames, chunk_frames):
                stop = min(start + chunk_frames, self.n_frames)
                nxt = pool.submit(self.frames, start, stop, workers)
                if pending is not None:
                    w.write(pending.result())
                pending = nxt
            w.write(pending.result())


def default_workers() -> int:
    """Threads making the synthetic frames: the CPU cores, at most 16."""
    return max(1, min(16, os.cpu_count() or 1))


def rms_error(shifts, truth) -> float:
    """RMS over frames of the Euclidean distance (px) between measured and true shifts (NaN
    when a measured shift is NaN).

    >>> rms_error([[0.5, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]])
    0.3535533905932738
    """
    d = np.asarray(shifts, np.float64) - np.asarray(truth, np.float64)
    return float(np.sqrt(np.mean(np.sum(d * d, axis=-1))))


# ------------------------------------------------------------------------------ the disk

def check_disk_space(folder, nbytes) -> None:
    """Raise :class:`XcorrError` when ``folder`` has less than ``nbytes`` plus a margin free."""
    free = shutil.disk_usage(folder).free
    need = nbytes + DISK_MARGIN
    if free < need:
        raise XcorrError(f"not enough free disk space in {folder} for the benchmark stack: "
                         f"{need / 2**30:.2f} GiB needed, {free / 2**30:.2f} GiB free; pass "
                         "--workdir on a larger disk, or fewer --frames or a smaller --size")


def filesystem_of(path) -> str:
    """The file system type of ``path`` from ``/proc/mounts`` (``"unknown"`` elsewhere)."""
    try:
        path = os.path.realpath(path)
        best, kind = "", "unknown"
        with open("/proc/mounts", encoding="utf-8") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 3:
                    mount = parts[1].replace("\\040", " ")
                    inside = path == mount or path.startswith(mount.rstrip("/") + "/")
                    if inside and len(mount) > len(best):
                        best, kind = mount, parts[2]
        return kind
    except OSError:
        return "unknown"


# ------------------------------------------------------------------------------ the rows

def _timed(fn):
    """``(seconds, fn())`` by wall clock."""
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def read_imread(path, frames=None):
    """``tifffile.imread``: the whole file (or the pages ``frames``) into a new array."""
    import tifffile

    return tifffile.imread(path) if frames is None else tifffile.imread(path, key=frames)


def read_memmap_chunks(path, chunk_frames=READ_CHUNK, stop=None) -> int:
    """Copy every frame (up to ``stop``) out of ``tifffile.memmap(path)`` into one reused
    buffer of ``chunk_frames`` frames; returns the frames read."""
    import tifffile

    mm = tifffile.memmap(path, mode="r")
    mm = mm.reshape((-1, *mm.shape[-2:]))
    n = len(mm) if stop is None else min(stop, len(mm))
    _copy_frames(mm, 0, n, chunk_frames)
    del mm
    return n


def _copy_frames(mm, start, stop, chunk_frames):
    """Copy frames ``start:stop`` of a memory map into one reused buffer, a chunk at a time."""
    buf = np.empty((min(chunk_frames, stop - start), *mm.shape[1:]), mm.dtype)
    for a in range(start, stop, chunk_frames):
        k = min(chunk_frames, stop - a)
        np.copyto(buf[:k], mm[a:a + k])


def cupy_pair_shift(reference, frame) -> np.ndarray:
    """One call of cuCIM's ``phase_cross_correlation(reference, frame)`` (``upsample_factor=1``,
    ``normalization="phase"``), as a loop over pairs makes it: both FFTs every call, the
    normalized cross-power spectrum, its inverse FFT, argmax, and the error terms cuCIM
    computes (image amplitudes, peak value); the shift comes back to the host.

    The inputs are float32 CuPy arrays: a generous peer, since cuCIM given the uint16 frames
    would compute in complex128 (CuPy's FFT promotes integer input to double precision).
    Returns ``(dy, dx)`` to apply to ``frame``, NumPy float64.
    """
    import cupy as cp

    src_freq = cp.fft.fft2(reference)
    target_freq = cp.fft.fft2(frame)
    product = src_freq * target_freq.conj()
    eps = np.finfo(product.real.dtype).eps
    product /= cp.maximum(cp.abs(product), 100 * eps)
    cc = cp.fft.ifft2(product)
    idx = cp.argmax(cp.abs(cc))
    peak = cc.ravel()[idx]
    src_amp = cp.sum(cp.real(src_freq * src_freq.conj())) / src_freq.size
    target_amp = cp.sum(cp.real(target_freq * target_freq.conj())) / target_freq.size
    h, w = cc.shape
    host = cp.stack([idx.astype(cp.float64), src_amp.astype(cp.float64),
                     target_amp.astype(cp.float64), cp.abs(peak).astype(cp.float64)]).get()
    iy, ix = divmod(int(host[0]), w)
    dy = iy - h if iy > h // 2 else iy
    dx = ix - w if ix > w // 2 else ix
    return np.array([dy, dx], np.float64)


def cupy_pair_loop(path, stop=None) -> np.ndarray:
    """The per-pair CuPy loop over the file: frame 0 is the reference (uploaded once, FFT'd
    every call); every frame is read from the memory map, uploaded and registered.  Returns
    the ``(n, 2)`` shifts."""
    import cupy as cp
    import tifffile

    mm = tifffile.memmap(path, mode="r")
    mm = mm.reshape((-1, *mm.shape[-2:]))
    n = len(mm) if stop is None else min(stop, len(mm))
    ref = cp.asarray(mm[0]).astype(cp.float32)
    out = np.zeros((n, 2))
    for i in range(n):
        out[i] = cupy_pair_shift(ref, cp.asarray(mm[i]).astype(cp.float32))
    del mm
    return out


def skimage_loop(path, stop) -> np.ndarray:
    """``skimage.registration.phase_cross_correlation(frame0, frame)`` for the first ``stop``
    frames of the file (defaults: ``upsample_factor=1``, phase normalization)."""
    import tifffile
    from skimage.registration import phase_cross_correlation

    mm = tifffile.memmap(path, mode="r")
    mm = mm.reshape((-1, *mm.shape[-2:]))
    ref = np.array(mm[0])
    n = min(stop, len(mm))
    out = np.zeros((n, 2))
    for i in range(n):
        out[i] = phase_cross_correlation(ref, np.asarray(mm[i]))[0]
    del mm
    return out


def read_memmap_parallel(path, readers, chunk_frames=READ_CHUNK) -> int:
    """:func:`read_memmap_chunks` by ``readers`` threads at once, each copying one contiguous
    range of frames (as ``--gpus`` reads: one reader per GPU); returns the frames read."""
    import tifffile

    from ..distributed._multi_gpu import frame_ranges

    mm = tifffile.memmap(path, mode="r")
    mm = mm.reshape((-1, *mm.shape[-2:]))
    ranges = frame_ranges(len(mm), readers)
    with concurrent.futures.ThreadPoolExecutor(len(ranges)) as pool:
        for f in [pool.submit(_copy_frames, mm, a, b, chunk_frames) for a, b in ranges]:
            f.result()
    return ranges[-1][1]


def gpu_rows_names(gpus):
    """Names of the ``--gpus`` rows: the parallel read and the unbounded run."""
    label = ",".join(map(str, gpus))
    return (f"tifffile.memmap, {len(gpus)} readers in threads",
            f"{ALIGN_FULL} --gpus {label}")


def make_row(name, kind, frames, frame_bytes, seconds, shifts=None, truth=None, note="",
             warmup="", error="") -> dict:
    """A row of the table: ``name``, ``kind`` (``read``, ``xcorr`` or ``peer``), ``frames``,
    ``seconds``, ``bytes``, ``fps``, ``gbps``, ``rms_px``, ``max_err_px``, ``note``, ``warmup``
    and ``error`` (why it failed; then ``seconds`` is None).  :func:`summarise` adds the ratios."""
    ok = seconds is not None and seconds > 0
    row = {"name": name, "kind": kind, "frames": int(frames), "seconds": seconds,
           "bytes": int(frames) * int(frame_bytes),
           "fps": frames / seconds if ok else None,
           "gbps": frames * frame_bytes / seconds / 1e9 if ok else None,
           "rms_px": None, "max_err_px": None, "note": note, "warmup": warmup, "error": error}
    if shifts is not None and truth is not None:
        truth = np.asarray(truth)[:len(shifts)]
        row["rms_px"] = rms_error(shifts, truth)
        row["max_err_px"] = float(np.nanmax(np.abs(np.asarray(shifts) - truth)))
    return row


def _status(row) -> str:
    if row["error"] or row["seconds"] is None:
        return "ERROR"
    if row["kind"] != "xcorr":
        return "-"
    rms = row["rms_px"]
    return "ok" if rms is not None and rms <= ACCURACY_PX else "INACCURATE"


def summarise(rows) -> list:
    """Add ``vs_read`` (frames/s over the fastest plain read's), ``vs_loop`` (over the per-pair
    loop's) and ``status`` (``ok``, ``INACCURATE`` or ``ERROR`` for the xcorr rows, ``-`` for
    the others, ``ERROR`` for any failed row) to every row; returns ``rows``."""
    reads = [r["fps"] for r in rows if r["kind"] == "read" and r["fps"]]
    base = max(reads) if reads else None
    loop = next((r["fps"] for r in rows if r["name"] == LOOP and r["fps"]), None)
    for r in rows:
        r["vs_read"] = r["fps"] / base if r["fps"] and base else None
        r["vs_loop"] = r["fps"] / loop if r["fps"] and loop else None
        r["status"] = _status(r)
    return rows


# ------------------------------------------------------------------------------ reporting

COLUMNS = ("path", "frames", "seconds", "frames/s", "GB/s", "vs plain read", "vs per-pair loop",
           "RMS error px", "check", "notes")


def _num(value, fmt) -> str:
    return "n/a" if value is None or not np.isfinite(value) else format(value, fmt)


def _seconds(value) -> str:
    """Seconds to 3 decimals below 10 s, to 1 above (``n/a`` for a failed row)."""
    return _num(value, ".3f" if value is not None and value < 10 else ".1f")


def format_row(row) -> str:
    """One Markdown table line of a row."""
    notes = [n for n in (row.get("note"), row.get("error")) if n]
    cells = [row["name"], row["frames"], _seconds(row["seconds"]), _num(row["fps"], ".1f"),
             _num(row["gbps"], ".2f"),
             "n/a" if row.get("vs_read") is None else f"{100 * row['vs_read']:.0f}%",
             "n/a" if row.get("vs_loop") is None else f"{row['vs_loop']:.1f}x",
             _num(row["rms_px"], ".3f") if row["kind"] != "read" else "",
             row.get("status", ""), "; ".join(notes)]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def table_header() -> str:
    """The two Markdown header lines of the table."""
    return "| " + " | ".join(COLUMNS) + " |\n|" + " --- |" * len(COLUMNS)


def format_table(rows, header=()) -> str:
    """The ``header`` lines, then a Markdown table of summarised rows.

    Examples
    --------
    >>> rows = summarise([make_row(READ_IMREAD, "read", 10, 100, 1.0),
    ...                   make_row(LOOP, "peer", 10, 100, 5.0)])
    >>> print(format_table(rows).splitlines()[3])
    | per-pair CuPy FFT loop | 10 | 5.000 | 2.0 | 0.00 | 20% | 1.0x | n/a | - |  |
    """
    return "\n".join(list(header) + [table_header()] + [format_row(r) for r in rows])


def multi_gpu_lines(rows, gpus) -> list:
    """The ``--gpus`` target: the unbounded run on ``gpus`` at least
    :data:`TARGET_MULTI_SPEEDUP` times one GPU's, or, where reading is the limit, within 10% of
    the plain read by as many reader threads.

    >>> rows = [make_row(ALIGN_FULL, "xcorr", 10, 100, 2.0),
    ...         make_row("tifffile.memmap, 2 readers in threads", "read_multi", 10, 100, 0.9),
    ...         make_row(f"{ALIGN_FULL} --gpus 0,1", "xcorr", 10, 100, 1.0)]
    >>> print(multi_gpu_lines(rows, (0, 1))[0])
    xcorr align (unbounded) --gpus 0,1: 2.00x one GPU (target >= 1.7x: yes); 90% of the 2-reader plain read (target >= 90%: yes)
    """
    read_name, multi_name = gpu_rows_names(gpus)
    by_name = {r["name"]: r for r in rows}
    one, multi, read = (by_name.get(k, {}).get("fps") for k in (ALIGN_FULL, multi_name,
                                                                 read_name))
    if not multi:
        return []
    speedup = f"{multi / one:.2f}x one GPU (target >= {TARGET_MULTI_SPEEDUP:g}x: " \
              f"{'yes' if multi / one >= TARGET_MULTI_SPEEDUP else 'no'})" if one else "n/a"
    share = f"{100 * multi / read:.0f}% of the {len(gpus)}-reader plain read (target >= " \
            f"{100 * TARGET_MULTI_VS_READ:.0f}%: " \
            f"{'yes' if multi / read >= TARGET_MULTI_VS_READ else 'no'})" if read else "n/a"
    return [f"{multi_name}: {speedup}; {share}"]


def target_lines(rows) -> list:
    """The issue's two targets for each row of :data:`TARGET_ROWS`: ``yes``/``no`` and the value.

    >>> rows = summarise([make_row(READ_IMREAD, "read", 10, 100, 1.0),
    ...                   make_row(ALIGN_BOUNDED, "xcorr", 10, 100, 1.1),
    ...                   make_row(LOOP, "peer", 10, 100, 6.0)])
    >>> for part in target_lines(rows)[0].split("; "):
    ...     print(part)
    xcorr align --max-shift 16: end-to-end >= 80% of plain read: yes (91%)
    >= 5x the per-pair CuPy loop: yes (5.5x)
    """
    lines = []
    by_name = {r["name"]: r for r in rows}
    for name in TARGET_ROWS:
        r = by_name.get(name)
        if r is None:
            continue
        vr, vl = r.get("vs_read"), r.get("vs_loop")
        read = "n/a" if vr is None else (f"{'yes' if vr >= TARGET_VS_READ else 'no'} "
                                         f"({100 * vr:.0f}%)")
        loop = "n/a" if vl is None else f"{'yes' if vl >= TARGET_VS_LOOP else 'no'} ({vl:.1f}x)"
        lines.append(f"{name}: end-to-end >= {100 * TARGET_VS_READ:.0f}% of plain read: {read}; "
                     f">= {TARGET_VS_LOOP:g}x the per-pair CuPy loop: {loop}")
    return lines


def _more_versions() -> str:
    parts = []
    for name, label in (("numpy", "numpy"), ("tifffile", "tifffile"),
                        ("skimage", "scikit-image")):
        try:
            parts.append(f"{label} {__import__(name).__version__}")
        except Exception:  # noqa: BLE001
            parts.append(f"{label} missing")
    return ", ".join(parts)


def header_lines(device, stack, path, written_s, workers, repeat=1) -> list:
    """Device, date, versions, stack and file lines printed above the table."""
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    h, w = stack.shape
    return [f"xcorr bench align on {device}, {date}",
            f"versions: {_versions()}, {_more_versions()}",
            f"stack: {stack.n_frames} frames of {h}x{w} uint16 ({stack.nbytes / 2**30:.2f} GiB), "
            f"random-walk drift within +-{MAX_DRIFT:g} px (subpixel, bilinear), Poisson noise; "
            f"made and written in {written_s:.1f} s ({workers} threads)",
            f"file: {path} ({filesystem_of(path)}; uncompressed, contiguous, memory-mappable), "
            "in the page cache (just written, not dropped)",
            "timing: wall clock (time.perf_counter) over the whole file after an untimed "
            f"warm-up{'' if repeat == 1 else f', median of {repeat} runs'}; align rows call "
            "xcorr_app.align(path, device='gpu') in process"]


# ------------------------------------------------------------------------------ running

def _align_kwargs(extra, max_memory):
    """``align()`` keywords: the row's, plus ``max_memory`` where ``align`` takes it."""
    from ..alignment._pipeline import align

    kw = {"device": "gpu", **extra}
    if max_memory is not None and "max_memory" in inspect.signature(align).parameters:
        kw["max_memory"] = max_memory
    return kw


def _align_chunk_limit():
    """The default ``chunk_frames`` of ``align()`` (the most frames of a chunk), or None."""
    from ..alignment._pipeline import align

    p = inspect.signature(align).parameters.get("chunk_frames")
    return p.default if p is not None and isinstance(p.default, int) else None


def _gpu(device_id):
    import cupy

    return cupy.cuda.Device(device_id)


def _free_if_gpu():
    from .. import backend

    if backend.gpu_available():
        _free_gpu_memory()


def warm_align(path, n, kwargs) -> str:
    """Run ``align`` untimed on the chunk shapes of the timed run: on the first chunk's worth of
    frames in memory (which tells the chunk size ``align`` picks), then on the last, partial
    chunk's; on the whole file when the chunking cannot be known.  Returns the note."""
    import tifffile

    from ..alignment._pipeline import align

    limit = _align_chunk_limit() if "chunk_frames" not in kwargs else kwargs["chunk_frames"]
    if limit is None:
        _free_if_gpu()
        align(path, **kwargs)
        return "one untimed pass over the whole file"
    mm = tifffile.memmap(path, mode="r")
    mm = mm.reshape((-1, *mm.shape[-2:]))
    first = min(limit, n)
    _free_if_gpu()
    res = align(np.array(mm[:first]), **kwargs)
    chunk = res.settings.get("chunk_frames")
    chunk = int(chunk) if isinstance(chunk, (int, np.integer)) and chunk >= 1 else limit
    sizes = [first]
    tail = n % chunk
    if tail and tail != first % chunk:
        _free_if_gpu()
        align(np.array(mm[:tail]), **kwargs)
        sizes.append(tail)
    del mm
    _free_if_gpu()
    return (f"align on the first {' and '.join(map(str, sizes))} frames in memory, "
            f"chunks of {chunk} (untimed)")


def _measure(name, kind, n, frame_bytes, warm, timed, truth=None, repeat=1):
    """Warm up, time ``repeat`` times (the row has the median, ``runs`` all of them), and build
    the row; a failure becomes an ``ERROR`` row."""
    try:
        note = warm() or ""
        runs, shifts = [], None
        for _ in range(max(1, int(repeat))):
            seconds, out = _timed(timed)
            runs.append(seconds)
            shifts = out if isinstance(out, np.ndarray) else None
        row = make_row(name, kind, n, frame_bytes, float(np.median(runs)), shifts, truth,
                       warmup=note)
        row["runs"] = runs
        if len(runs) > 1:
            row["note"] = (f"median of {len(runs)} runs ({_seconds(min(runs))} to "
                           f"{_seconds(max(runs))} s)")
        return row
    except Exception as exc:  # noqa: BLE001 - e.g. out of memory: a table entry, not fatal
        return make_row(name, kind, n, frame_bytes, None, error=_reason(exc))


def _report(row, echo):
    """Print the progress line of a finished row."""
    took = "failed" if row["error"] else f"{_seconds(row['seconds'])} s"
    warm = f"; warm-up: {row['warmup']}" if row["warmup"] else ""
    echo(f"  {row['name']}: {took}{warm}")
    if row["error"]:
        echo(f"    {row['error']}")
    return row


def read_rows(path, n, frame_bytes, echo=print, repeat=1) -> list:
    """The two plain-read rows (CPU only): :data:`READ_IMREAD` and :data:`READ_MEMMAP`."""
    few = min(WARMUP_FRAMES, n)
    note = f"read frames 0-{few - 1} (untimed)"

    def warm_imread():
        read_imread(path, range(few))
        return note

    def warm_memmap():
        read_memmap_chunks(path, READ_CHUNK, few)
        return note

    return [_report(_measure(READ_IMREAD, "read", n, frame_bytes, warm_imread,
                             lambda: read_imread(path).shape, repeat=repeat), echo),
            _report(_measure(READ_MEMMAP, "read", n, frame_bytes, warm_memmap,
                             lambda: read_memmap_chunks(path, READ_CHUNK), repeat=repeat),
                    echo)]


def skimage_row(path, n, frame_bytes, truth, echo=print, repeat=1) -> dict:
    """The scikit-image row (CPU only) on the first :data:`SKIMAGE_FRAMES` frames."""
    k = min(SKIMAGE_FRAMES, n)
    name = f"{SKIMAGE}, {k} frames"
    try:
        importlib.import_module("skimage.registration")
    except Exception as exc:  # noqa: BLE001
        return _report(make_row(name, "peer", k, frame_bytes, None,
                                error=f"scikit-image not importable ({type(exc).__name__})"), echo)

    def warm():
        skimage_loop(path, 1)
        return "1 pair (untimed)"

    return _report(_measure(name, "peer", k, frame_bytes, warm, lambda: skimage_loop(path, k),
                            truth, repeat), echo)


def run(stack, path, *, max_memory=None, echo=print, repeat=1, gpus=None) -> list:
    """Time every row on the written file ``path`` of ``stack`` (``repeat`` times each, the
    median reported); print progress lines.  With ``gpus``, also the parallel read and the
    unbounded run over those GPUs (:func:`multi_gpu_lines`).

    Returns
    -------
    list of dict
        The rows of :func:`make_row`, summarised (:func:`summarise`), in table order.
    """
    from ..alignment._pipeline import align

    n = stack.n_frames
    frame_bytes = stack.shape[0] * stack.shape[1] * 2
    truth = stack.shifts
    rows = read_rows(path, n, frame_bytes, echo, repeat)
    for name, extra in ALIGN_ROWS.items():
        kw = _align_kwargs(extra, max_memory)
        rows.append(_report(_measure(name, "xcorr", n, frame_bytes,
                                     lambda: warm_align(path, n, kw),
                                     lambda: np.asarray(align(path, **kw).shifts), truth,
                                     repeat), echo))
        _free_gpu_memory()
    if gpus:
        read_name, multi_name = gpu_rows_names(gpus)
        few = min(WARMUP_FRAMES * len(gpus), n)
        rows.append(_report(_measure(read_name, "read_multi", n, frame_bytes,
                                     lambda: read_memmap_parallel(path, len(gpus)) and None,
                                     lambda: read_memmap_parallel(path, len(gpus)),
                                     repeat=repeat), echo))
        kw = _align_kwargs({"max_shift": None, "gpus": list(gpus)}, max_memory)

        def warm_multi():
            for g in gpus:  # free every GPU's pool, then one untimed pass
                with _gpu(g):
                    _free_gpu_memory()
            align(path, **kw)
            return "one untimed pass over the whole file"

        rows.append(_report(_measure(multi_name, "xcorr", n, frame_bytes, warm_multi,
                                     lambda: np.asarray(align(path, **kw).shifts), truth,
                                     repeat), echo))
        for g in gpus:
            with _gpu(g):
                _free_gpu_memory()
    few = min(WARMUP_FRAMES, n)

    def warm_loop():
        cupy_pair_loop(path, few)
        return f"{few} pairs (untimed)"

    rows.append(_report(_measure(LOOP, "peer", n, frame_bytes, warm_loop,
                                 lambda: cupy_pair_loop(path), truth, repeat), echo))
    _free_gpu_memory()
    rows.append(skimage_row(path, n, frame_bytes, truth, echo, repeat))
    return summarise(rows)


def main(*, quick=False, frames=None, size=None, workdir=None, keep=False, json_path=None,
         force=False, echo=print, max_memory=None, repeat=1, seed=0, gpus=None) -> int:
    """What ``xcorr bench align`` does: check the options, write the stack, run, report.

    Parameters
    ----------
    quick : bool
        32 frames of 512x512 instead of 512 frames of 2048x2048.
    frames : int, optional
    size : str or int, optional
        ``"H"`` or ``"HxW"`` (each side at least :data:`MIN_SIDE`).
    workdir : path, optional
        Folder of the temporary folder holding the stack (default ``$TMPDIR`` or ``/tmp``);
        it must be on local disk with room for the file.
    keep : bool
        Keep the stack file (its path is printed) instead of deleting it.
    json_path : path, optional
        Also write the header and the rows as JSON.
    force : bool
        Overwrite an existing ``json_path``.
    echo : callable
        Receives each printed line.
    max_memory : optional
        Passed on to :func:`xcorr_app.align` when it takes a ``max_memory`` keyword.
    repeat : int
        Timed runs of every row (after one warm-up); the table gives the median.
    seed : int
        Seeds the scene, the drift and the noise.
    gpus : str or sequence of int, optional
        Also time the unbounded run shared out over these GPUs (``"0,1"``, ``"all"``) and a
        read by as many threads.

    Returns
    -------
    int
        0, or 1 when an ``xcorr align`` row failed or is off the known drift by more than
        :data:`ACCURACY_PX` RMS (missed speed targets are reported, not an error).

    Raises
    ------
    XcorrError
        For a bad option, no usable GPU, too little disk space, or an existing ``json_path``
        without ``force``.
    """
    from .. import backend
    from ..io._writer import prepare_outputs, write_text
    from .._cuda.timing import device_name

    shape = QUICK_SHAPE if quick else DEFAULT_SHAPE
    h, w = shape[1:] if size is None else parse_size(size)
    n = shape[0] if frames is None else int(frames)
    if n < 1:
        raise XcorrError(f"--frames must be at least 1, got {n}")
    if int(repeat) < 1:
        raise XcorrError(f"--repeat must be at least 1, got {repeat}")
    if min(h, w) < MIN_SIDE:
        raise XcorrError(f"--size must be at least {MIN_SIDE} px per side (the drift is up to "
                         f"{MAX_DRIFT:g} px), got {h}x{w}")
    if not backend.gpu_available():
        raise XcorrError(f"xcorr bench align needs a GPU: {backend.gpu_unavailable_reason()}")
    if gpus is not None:
        from ..distributed._multi_gpu import parse_gpus

        gpus = parse_gpus(gpus)
    if json_path is not None:
        prepare_outputs([json_path], force)
    base = Path(workdir) if workdir is not None else Path(tempfile.gettempdir())
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise XcorrError(f"cannot create --workdir {base} ({exc.strerror or exc})") from exc
    check_disk_space(base, n * h * w * 2)
    folder = Path(tempfile.mkdtemp(prefix="xcorr-bench-align-", dir=base))
    try:
        path = folder / "stack.tif"
        workers = default_workers()
        t = time.perf_counter()
        stack = SyntheticStack(n, (h, w), seed=seed)
        stack.write(path, workers=workers)
        written = time.perf_counter() - t
        header = header_lines(device_name(), stack, path, written, workers, int(repeat))
        if max_memory is not None and "max_memory" not in _align_kwargs({}, max_memory):
            header.append(f"note: max_memory={max_memory!r} ignored (align() does not take it)")
        for line in header:
            echo(line)
        echo("measuring:")
        rows = run(stack, path, max_memory=max_memory, echo=echo, repeat=int(repeat),
                   gpus=gpus)
        device = device_name()
        for r in rows:
            r["device"] = device
        echo("")
        echo(format_table(rows))
        targets = target_lines(rows) + (multi_gpu_lines(rows, gpus) if gpus else [])
        for line in targets:
            echo(line)
        if keep:
            echo(f"stack kept: {path}")
        if json_path is not None:
            doc = {"header": header, "shape": [n, h, w], "truth_shifts": stack.shifts.tolist(),
                   "rows": rows, "targets": targets}
            write_text(json_path, json.dumps(doc, indent=1))
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    bad = [r for r in rows if r["kind"] == "xcorr" and r["status"] != "ok"]
    return 1 if bad else 0
