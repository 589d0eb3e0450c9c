"""The synthetic stack of ``xcorr bench align``: a smooth random scene that drifts by a known
random walk under Poisson noise, written to a TIFF file; and the checks of the disk it goes to.

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
import math
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ..errors import InputError, XcorrError

__all__ = ["MAX_DRIFT", "MIN_SIDE", "SyntheticStack", "drift_walk", "make_scene",
           "default_workers", "rms_error", "check_disk_space", "work_folder", "filesystem_of", "field_at",
           "nonrigid_stack", "truth_at"]

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
#: frames per chunk of the synthetic stack's generation
WRITE_CHUNK = 16
#: free disk space kept beyond the file (bytes)
DISK_MARGIN = 256 << 20


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
        from ..io import TiffStackWriter

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


def stack_shape(default, frames=None, size=None, repeat=1) -> tuple:
    """``(frames, height, width)`` of a benchmark's stack: ``default`` with ``--frames`` and
    ``--size`` (``"H"`` or ``"HxW"``) given, checked with ``--repeat`` (an InputError).

    >>> stack_shape((64, 2048, 2048), size="512x256")
    (64, 512, 256)
    """
    from ._common import parse_size

    n, h, w = default
    n = n if frames is None else int(frames)
    h, w = (h, w) if size is None else parse_size(size)
    if n < 2 or int(repeat) < 1 or min(h, w) < MIN_SIDE:
        raise InputError(f"--frames must be at least 2, --repeat at least 1 and --size at least "
                         f"{MIN_SIDE} px per side (the drift is up to {MAX_DRIFT:g} px); got "
                         f"{n}, {repeat} and {h}x{w}")
    return n, h, w


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


def check_disk_space(folder, nbytes) -> None:
    """Raise :class:`XcorrError` when ``folder`` has less than ``nbytes`` plus a margin free."""
    free = shutil.disk_usage(folder).free
    need = nbytes + DISK_MARGIN
    if free < need:
        raise XcorrError(f"not enough free disk space in {folder} for the benchmark stack: "
                         f"{need / 2**30:.2f} GiB needed, {free / 2**30:.2f} GiB free; pass "
                         "--workdir on a larger disk, or fewer --frames or a smaller --size")


def work_folder(workdir, nbytes, name) -> Path:
    """A new folder ``xcorr-bench-NAME-*`` for a benchmark stack of ``nbytes``, in ``workdir``
    (made if needed) or the temporary folder, after checking the disk has room
    (:class:`XcorrError` otherwise)."""
    base = Path(workdir) if workdir is not None else Path(tempfile.gettempdir())
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise XcorrError(f"cannot create --workdir {base} ({exc.strerror or exc})") from exc
    check_disk_space(base, nbytes)
    return Path(tempfile.mkdtemp(prefix=f"xcorr-bench-{name}-", dir=base))


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


def field_at(params, y, x):
    """The true shift ``(dy, dx)`` (align's sign: ``out[q] = frame[q - s(q)]``) at reference
    pixel ``(y, x)`` of a frame of :func:`nonrigid_stack` with ``params``: the rigid drift plus
    a low-frequency sinusoid along each axis."""
    rigid, amp, k, phase = params
    return np.stack([rigid[a] + amp[a, 0] * np.sin(k[a, 0] * y + phase[a, 0])
                     + amp[a, 1] * np.sin(k[a, 1] * x + phase[a, 1]) for a in range(2)], axis=-1)


def truth_at(params, points):
    """``(N, ..., 2)``: the true shifts of every frame at ``points`` ``(..., 2)`` (y, x)."""
    return np.stack([field_at(p, points[..., 0], points[..., 1]) for p in params])


def nonrigid_stack(rng, n=8, shape=(192, 192), drift=10.0, deform=3.0, peak=400.0,
                   image="coins", iterations=30):
    """``(uint16 stack, params)``: ``n`` frames of ``shape`` cut from a larger canvas through a
    known smooth deformation (:func:`field_at`: rigid drift up to ``drift`` px, deformation up
    to ``deform`` px across the frame, wavelengths of 400 to 600 px), by exact resampling (cubic
    B-splines of the canvas at the inverse map, found by ``iterations`` fixed-point steps),
    with Poisson noise of ``peak`` photons at the brightest pixel (peak SNR ``sqrt(peak)``).
    The canvas: a scikit-image photograph (``image``) band-limited by a 2-px gaussian PSF, or
    with ``image=None`` a smooth random scene (:func:`make_scene`) 64 px larger than the frame
    on each side.  Frame 0 is the reference (no motion).  The tests of piecewise-rigid
    registration and ``xcorr bench align --patches`` use it."""
    from scipy import ndimage as ndi

    h, w = shape
    if image is None:
        base = ndi.gaussian_filter(make_scene((h + 128, w + 128), seed=int(rng.integers(1 << 30)))
                                   .astype(np.float64), 2.0)
    else:
        from skimage import data

        base = ndi.gaussian_filter(getattr(data, image)().astype(np.float64), 2.0)
    coeffs = ndi.spline_filter(base, order=3)
    cy, cx = (base.shape[0] - h) // 2, (base.shape[1] - w) // 2
    yy, xx = np.mgrid[:h, :w].astype(np.float64)
    frames, params = [], []
    for i in range(n):
        p = (rng.uniform(-drift, drift, 2) if i else np.zeros(2),
             rng.choice([-1.0, 1.0], (2, 2)) * deform / 2 if i else np.zeros((2, 2)),
             2 * np.pi / rng.uniform(400.0, 600.0, (2, 2)), rng.uniform(0, 2 * np.pi, (2, 2)))
        qy, qx = yy.copy(), xx.copy()  # frame[y] = ref[q] where q - s(q) = y
        for _ in range(iterations):
            s = field_at(p, qy, qx)
            qy, qx = yy + s[..., 0], xx + s[..., 1]
        frames.append(ndi.map_coordinates(coeffs, [cy + qy, cx + qx], order=3, prefilter=False))
        params.append(p)
    frames = np.array(frames)
    frames = (frames - frames.min()) / (frames.max() - frames.min()) * peak
    return rng.poisson(frames).astype(np.uint16), params
