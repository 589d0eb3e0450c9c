"""cuFFT's first plans on a fresh machine: made early, in the background, and remembered.

cuFFT builds the kernels of a transform size when its first plan is made (a JIT, cached by the
CUDA driver on disk: ``~/.nv/ComputeCache`` or ``$CUDA_CACHE_PATH``).  On a fresh machine that
is 0.1-0.6 s per transform kind and size (H100, cuFFT of CUDA 13, 2026-11-23,
``tools/cufft_cold_probe.py``, ``tools/cufft_jit_probe.py``); with the driver's cache it is
1-10 ms, and a plan of another batch size after the first costs 1-4 ms either way.  A first
``xcorr align`` of 64 frames of 2048x2048 with ``--max-shift 16`` spent 0.76 s of its 1.5 s
measuring in six such plans.  Two things follow, both here:

* :func:`warm_async` makes the plans a run will need (batch 1, on a stream of its own) in a
  background thread as soon as the run knows its frame shape, while the main thread reads
  frames and decides its options: the plan creation releases the GIL.  :func:`wait_warm` is
  called before a run's first transform of those sizes, so that the main thread does not
  build the same kernels at the same time (two threads do not build faster: measured).
* :func:`is_warm` says whether this machine's driver cache was filled for a size by an earlier
  run (a marker written in xcorr's cache folder when a plan of that size was made): the
  planner (:mod:`xcorr_app.correlate._planner`) charges a cold FFT size its first plans'
  time, spread over the calls of the run (:data:`COLD_FFT_MS`), so a short first run takes
  a direct kernel (shipped built) while the FFT's kernels are built for the next run.

``XCORR_FFT_WARM=0`` turns the background plans off.

Examples
--------
>>> rfft2_specs((64, 80))
[('r2c', (64, 80)), ('c2r', (64, 80))]
>>> is_warm_key("r2c", (64, 80))[:4]
'r2c-'
"""

from __future__ import annotations

import atexit
import concurrent.futures
import threading

from .._config import FFT_WARM, cache_dir
from .._config import get as config_value

__all__ = ["COLD_FFT_MS", "rfft2_specs", "edge_specs", "warm_async", "spawn_warmers",
           "wait_warm", "is_warm", "mark_warm", "is_warm_key", "ENV"]

#: the environment variable that turns the background plans off (``0``)
ENV = FFT_WARM
#: what the first plans of one rfft2 size (its forward and inverse transforms) cost on a fresh
#: machine, ms (H100, 2026-11-23: 0.2-0.65 s each; the planner charges this much)
COLD_FFT_MS = 500.0

_FUTURES: dict = {}  # device id -> Future of the last plans queued (they run in turn)
_NEEDED: dict = {}  # device id -> Future of the last plans queued that a run waits for
_LOCK = threading.Lock()
_STOP = threading.Event()  # set at exit: the plans not begun are left
_VERSION = None


def rfft2_specs(shape) -> list:
    """The plans of ``rfft2`` / ``irfft2`` of ``shape`` (H, W) matrices."""
    shape = tuple(int(n) for n in shape)
    return [("r2c", shape), ("c2r", shape)]


def edge_specs(shape) -> list:
    """The 1-D plans of the periodic decomposition of ``shape`` frames (the half spectra of its
    edge differences, :func:`xcorr_app.registration.periodic_spectrum`)."""
    h, w = (int(n) for n in shape)
    return [("r2c1", (w,))] + ([("r2c1", (h,))] if h != w else [])


def _versions() -> str:
    """What the driver's JIT cache is valid for, read without CUDA: the NVIDIA driver's version
    line (Linux) and CuPy's version (its CUDA libraries, cuFFT among them).  A marker of another
    GPU of the same machine and driver may say warm for a GPU whose kernels were not built: that
    run is then a cold one, as before."""
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
    """Whether a plan of this kind (``"r2c"``, ``"c2r"``, ``"r2c1"``) and size was made on this
    machine before (its kernels are then in the driver's cache), by the marker
    :func:`mark_warm` left."""
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


#: the transform that makes each kind's plan (CuPy makes its plans when it runs them, and a
#: plan of any other batch size is then cheap): run here and in the helper processes
_TRANSFORMS = {
    "r2c": "cp.fft.rfft2(cp.zeros((1, *shape), cp.float32))",
    "c2r": "cp.fft.irfft2(cp.zeros((1, shape[0], shape[1] // 2 + 1), cp.complex64), s=shape)",
    "r2c1": "cp.fft.rfft(cp.zeros((2, shape[0]), cp.float32), axis=-1)",
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
_PROCS: list = []  # [((kind, shape), Popen)] of spawn_warmers


def _make(kind, shape, cp) -> None:
    """One plan of ``kind`` and ``shape``, made by running its transform on zeros (batch 1)."""
    if kind not in _TRANSFORMS:
        raise ValueError(f"unknown transform kind {kind!r}")
    exec(_TRANSFORMS[kind], {"cp": cp, "shape": tuple(shape)})


def spawn_warmers(specs) -> list:
    """Make the plans ``specs`` in helper processes, one per plan, started at once: cuFFT
    builds their kernels in parallel (threads of one process do not: they take turns), into
    the driver's cache on disk, where this process then finds them (:func:`wait_warm` waits
    for the helpers).  For the command line, which starts them as soon as it knows the frame
    shape, before its own CUDA context.  Returns the specs handed out (none when turned off
    or warm)."""
    if config_value(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return []
    busy = {spec for spec, _ in _PROCS}
    todo = [(k, tuple(int(n) for n in s)) for k, s in specs]
    todo = [spec for spec in dict.fromkeys(todo) if spec not in busy and not is_warm(*spec)]
    if not todo:
        return []
    import subprocess
    import sys

    program = _CHILD.format(transforms=_TRANSFORMS)
    with _LOCK:
        if not _PROCS and not _FUTURES:
            atexit.register(_at_exit)
        for kind, shape in todo:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-c", program, kind, "x".join(map(str, shape)),
                     str(_marker(kind, shape))],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
            except OSError:  # no process to spare: the run makes its plans itself
                continue
            _PROCS.append(((kind, shape), proc))
    return todo


def _inverse_kernels(device_id) -> None:
    """The two CuPy kernels around cuFFT's inverse real transform in ``cupy.fft.irfft2`` (a
    copy of the input, which C2R overwrites, and the division by the size), compiled by NVRTC
    on a fresh machine (0.1 s each): built here in parallel with cuFFT's own kernels."""
    import cupy as cp

    try:
        with cp.cuda.Device(device_id):
            stream = cp.cuda.Stream(non_blocking=True)
            with stream:
                cp.zeros(2, cp.complex64).copy()
                x = cp.ones(4, cp.float32)
                x /= 4  # the size, a Python int, as irfft2 divides
                stream.synchronize()
    except Exception:  # noqa: BLE001 - the run compiles them itself
        pass


def _run(specs, device_id) -> None:
    import cupy as cp

    with cp.cuda.Device(device_id):
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            for kind, shape in specs:
                if _STOP.is_set():
                    return
                try:
                    _make(kind, shape, cp)
                    stream.synchronize()
                except Exception:  # noqa: BLE001 - the run makes (and reports) its own plans
                    continue
                mark_warm(kind, shape)


def warm_async(specs, device_id=None, later=False):
    """Make the plans ``specs`` (``[(kind, shape)]``, e.g. :func:`rfft2_specs`) in a background
    thread on ``device_id`` (default: the current device); returns its Future, or ``None`` when
    turned off (:data:`ENV`) or every plan is warm already.  The plans of a device are made in
    turn, in the order asked.  ``later``: plans for a later run (the planner's cold FFT size),
    which :func:`wait_warm` does not wait for."""
    if config_value(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    import cupy as cp

    if device_id is None:
        device_id = cp.cuda.Device().id
    busy = {spec for spec, _ in _PROCS}  # being made by helper processes
    todo = [(k, tuple(s)) for k, s in specs if (k, tuple(s)) not in busy and not is_warm(k, s)]
    if not todo:
        return None
    with _LOCK:
        if not _FUTURES and not _PROCS:
            atexit.register(_at_exit)
        before = _FUTURES.get(device_id)
        fut = concurrent.futures.Future()

        def work():
            helper = None
            try:
                if any(k == "c2r" for k, _ in todo):  # CuPy's kernels of irfft2, meanwhile
                    helper = threading.Thread(target=_inverse_kernels, args=(device_id,),
                                              name="xcorr-cufft-kernels", daemon=True)
                    helper.start()
                if before is not None:
                    concurrent.futures.wait([before])
                _run(todo, device_id)
            finally:
                if helper is not None:
                    helper.join()
                fut.set_result(None)

        _FUTURES[device_id] = fut
        if not later:
            _NEEDED[device_id] = fut
        threading.Thread(target=work, name="xcorr-cufft-plans", daemon=True).start()
    return fut


def _at_exit() -> None:
    """At exit, the plan being made is finished (a thread stopped inside cuFFT while CUDA
    shuts down could crash the process) and the others are left.  Registered when the first
    warm-up starts, after CuPy's own exit handlers, so it runs before them."""
    _STOP.set()
    for fut in list(_FUTURES.values()):
        try:
            fut.result(timeout=10)
        except Exception:  # noqa: BLE001 - exiting anyway
            pass
    for _, proc in _PROCS:  # helpers still building: a few seconds, then stopped
        try:
            proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - TimeoutExpired: exiting anyway
            proc.kill()


def wait_warm(device_id=None) -> None:
    """Wait for the background plans of this device that a run needs (if any are being made;
    not those for a later run): called before a run's first transform."""
    while _PROCS and _PROCS[0][1].poll() is not None:  # finished helpers: forgotten
        _PROCS.pop(0)
    for _, proc in list(_PROCS):
        try:
            proc.wait(timeout=120)
        except Exception:  # noqa: BLE001 - a stuck helper: the run makes its own plans
            proc.kill()
    if not _NEEDED:
        return
    import cupy as cp

    fut = _NEEDED.get(cp.cuda.Device().id if device_id is None else device_id)
    if fut is not None and not fut.done():
        fut.result()
