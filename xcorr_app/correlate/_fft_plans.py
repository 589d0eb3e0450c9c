"""cuFFT's first plans on a fresh machine: charged by the planner, built for the next run.

cuFFT builds the kernels of a transform size when its first plan is made (a JIT, cached by the
CUDA driver on disk: ``~/.nv/ComputeCache`` or ``$CUDA_CACHE_PATH``): tenths of a second per
transform kind and size on a fresh machine, milliseconds with the driver's cache
(docs/kernels.md, measurements), a large part of a short first run.

So the planner (:mod:`xcorr_app.correlate._planner`) charges an FFT size never planned on this
machine the first plans' time (:data:`COLD_FFT_MS`), spread over the calls of the run, once per
process and size: a short first run then takes a direct kernel (shipped built) instead, and
:func:`build_later` has the size's plans built for the next run by helper processes started
when this one exits (not waited for), which leave the markers :func:`is_warm` reads (built
during the run, in a thread or in helper processes, they slowed the run's own CUDA work by as
much as they saved).

``XCORR_FFT_WARM=0`` starts no helper processes.

Examples
--------
>>> rfft2_specs((64, 80))
[('r2c', (64, 80)), ('c2r', (64, 80))]
>>> is_warm_key("r2c", (64, 80))
'r2c-64x80'
"""

from __future__ import annotations

import atexit
import threading

from .._config import FFT_WARM, cache_dir
from .._config import get as config_value

__all__ = ["COLD_FFT_MS", "ENV", "rfft2_specs", "is_warm", "mark_warm", "is_warm_key",
           "build_later", "charge_once"]

#: the environment variable that turns the helper processes off (``0``)
ENV = FFT_WARM
#: what the first plans of one rfft2 size (its forward and inverse transforms) cost on a fresh
#: machine, ms (the planner charges this much; docs/kernels.md, measurements)
COLD_FFT_MS = 500.0

_LOCK = threading.Lock()
_LATER: list = []  # specs to build when this process exits (build_later)
_CHARGED: set = set()  # FFT sizes the planner charged in this process (charge_once)
_VERSION = None

#: the transform that makes each kind's plan (CuPy makes its plans when it runs them, and a
#: plan of any other batch size is then cheap)
_TRANSFORMS = {
    "r2c": "cp.fft.rfft2(cp.zeros((1, *shape), cp.float32))",
    "c2r": "cp.fft.irfft2(cp.zeros((1, shape[0], shape[1] // 2 + 1), cp.complex64), s=shape)",
}
#: a helper process: one plan, then its marker; nothing of xcorr imported (0.2-0.35 s less)
_CHILD = """
import pathlib, sys
import cupy as cp
kind, shape, marker = sys.argv[1], tuple(int(n) for n in sys.argv[2].split("x")), sys.argv[3]
exec({transforms!r}[kind])
cp.cuda.Device().synchronize()
path = pathlib.Path(marker)
path.parent.mkdir(parents=True, exist_ok=True)
path.touch()
"""


def rfft2_specs(shape) -> list:
    """The plans of ``rfft2`` / ``irfft2`` of ``shape`` (H, W) matrices."""
    shape = tuple(int(n) for n in shape)
    return [("r2c", shape), ("c2r", shape)]


def _versions() -> str:
    """What the driver's JIT cache is valid for, read without CUDA: the NVIDIA driver's version
    line (Linux) and CuPy's version (its CUDA libraries, cuFFT among them).  A marker left by
    another GPU of the machine may call a size warm for a GPU of another kind: that run is then
    a cold one, as before."""
    global _VERSION
    if _VERSION is None:
        import hashlib
        from importlib import metadata

        try:
            with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as f:
                driver = f.readline()
        except OSError:
            driver = ""
        cupy = ""
        for dist in ("cupy-cuda13x", "cupy-cuda12x", "cupy"):
            try:
                cupy = f"{dist}={metadata.version(dist)}"
                break
            except metadata.PackageNotFoundError:
                continue
        _VERSION = hashlib.sha1(f"{driver}|{cupy}".encode()).hexdigest()[:12]
    return _VERSION


def is_warm_key(kind: str, shape) -> str:
    """The marker name of a transform kind and size (without the machine's versions)."""
    return f"{kind}-" + "x".join(str(int(n)) for n in shape)


def _marker(kind, shape):
    return cache_dir() / "cufft" / f"{_versions()}-{is_warm_key(kind, shape)}"


def is_warm(kind: str, shape) -> bool:
    """Whether a plan of this kind (``"r2c"``, ``"c2r"``) and size was made on this machine
    before (its kernels are then in the driver's cache), by the marker :func:`mark_warm`
    left."""
    try:
        return _marker(kind, shape).exists()
    except OSError:
        return False


def mark_warm(kind: str, shape) -> None:
    """Leave the marker of :func:`is_warm` (quietly: a read-only cache folder only costs the
    next run its cold plans)."""
    try:
        path = _marker(kind, shape)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:
        pass


def charge_once(size) -> bool:
    """Whether the planner charges the cold FFT ``size`` now: the first time in this process
    (later decisions of the process plan the FFT, which then builds its kernels here once, so
    the size is marked warm for the runs after)."""
    size = tuple(int(n) for n in size)
    with _LOCK:
        if size not in _CHARGED:
            _CHARGED.add(size)
            return True
    for kind, shape in rfft2_specs(size):
        mark_warm(kind, shape)
    return False


def build_later(specs) -> None:
    """Have the plans ``specs`` (``[(kind, shape)]``) built, and marked, by helper processes
    started when this process exits (one per plan: cuFFT builds in parallel across processes),
    which it does not wait for; nothing where turned off (:data:`ENV`)."""
    if config_value(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return
    with _LOCK:
        if not _LATER:
            atexit.register(_spawn_later)
        for kind, shape in specs:
            spec = (kind, tuple(int(n) for n in shape))
            if kind in _TRANSFORMS and spec not in [s[:2] for s in _LATER]:
                _LATER.append(spec + (_marker(*spec),))  # the cache folder of now


#: a helper building a size is left alone this long by the helpers of later runs (seconds)
BUILDING_S = 120.0


def _claim(marker) -> bool:
    """Whether this process may start the helper of ``marker``: not warm, and no helper of
    another run building it (a ``.building`` file younger than :data:`BUILDING_S`)."""
    import os
    import time

    if marker.exists():
        return False
    claim = marker.with_name(marker.name + ".building")
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        if claim.exists() and time.time() - claim.stat().st_mtime < BUILDING_S:
            return False
        claim.unlink(missing_ok=True)
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except OSError:  # another run claimed it first, or the folder is read-only
        return False


def _spawn_later() -> None:
    import subprocess
    import sys

    program = _CHILD.format(transforms=_TRANSFORMS)
    for kind, shape, marker in _LATER:
        if not _claim(marker):
            continue
        try:
            subprocess.Popen([sys.executable, "-c", program, kind, "x".join(map(str, shape)),
                              str(marker)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)  # outlives this process
        except OSError:  # no process to spare: the next run is a cold one again
            return
