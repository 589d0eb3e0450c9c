"""The one autotuner: choices measured once per device, problem and kernel code, remembered in
memory and in one file on disk (``tuning.json`` in :func:`xcorr_app._config.cache_dir`).

Two kinds of callers share it: the cross-correlation planner, which stores its decisions with
their timings (:func:`remember` / :func:`recall`), and the convolution kernels, which pick the
fastest of a few runnable variants with :func:`fastest`, as cuDNN's benchmark mode does.

The file is read, changed and replaced under a lock (``filelock``), so processes that tune at
the same time (several GPUs, a Dask cluster) do not lose each other's entries; the write is
atomic (:func:`xcorr_app.io.atomic_path`).  An unreadable or unwritable cache only costs a
new measurement.

Examples
--------
>>> import os, tempfile
>>> os.environ["XCORR_CACHE_DIR"] = tempfile.mkdtemp()
>>> remember("demo", ["problem", 1], {"choice": [2, 4]})
>>> recall("demo", ["problem", 1])
{'choice': [2, 4]}
>>> forget_memory()
>>> recall("demo", ["problem", 1])  # read back from disk
{'choice': [2, 4]}
>>> del os.environ["XCORR_CACHE_DIR"]
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading

from .._config import cache_dir
from .._version import __version__
from ..io import atomic_path
from .loader import kernel_sources
from .timing import device_name, time_gpu

CACHE_FORMAT = 2
CACHE_NAME = "tuning.json"

_MEMORY: dict = {}
_LOCK = threading.Lock()


def cache_file():
    """The path of the tuning cache."""
    return cache_dir() / CACHE_NAME


@functools.lru_cache(maxsize=1)
def code_hash() -> str:
    """A digest of the package version and every kernel source: a change of either makes every
    remembered choice stale."""
    h = hashlib.sha256(__version__.encode())
    for p in kernel_sources():
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def device_fingerprint() -> list:
    """``[GPU name, compute capability, code hash]``: the part of every key that says on what
    and with which code a choice was measured."""
    import cupy as cp

    return [device_name(), cp.cuda.Device().compute_capability, code_hash()]


def _text(namespace: str, key) -> str:
    return json.dumps([namespace, key], default=list)


def _load() -> dict:
    try:
        data = json.loads(cache_file().read_text())
        if data.get("format") == CACHE_FORMAT:
            return data.get("entries", {})
    except (OSError, ValueError, AttributeError, ImportError):  # ImportError: platformdirs
        pass
    return {}


def recall(namespace: str, key):
    """The entry remembered for ``key`` (JSON-able) in ``namespace``, or ``None``."""
    text = _text(namespace, key)
    if text not in _MEMORY:
        entry = _load().get(text)
        if entry is None:
            return None
        _MEMORY[text] = entry
    return _MEMORY[text]


def remember(namespace: str, key, entry) -> None:
    """Remember ``entry`` (JSON-able) for ``key``, in memory and on disk."""
    import filelock

    text = _text(namespace, key)
    # keep what the disk would give back (tuples become lists), so that a choice recalled from
    # memory compares as one recalled from the file
    entry = _MEMORY[text] = json.loads(json.dumps(entry, default=list))
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _LOCK, filelock.FileLock(str(path) + ".lock", timeout=10):
            entries = _load()
            entries[text] = entry
            with atomic_path(path) as tmp:
                tmp.write_text(json.dumps({"format": CACHE_FORMAT, "entries": entries},
                                          indent=0, default=list))
    except (OSError, ImportError, filelock.Timeout):
        pass  # an unwritable cache only costs a re-measurement next time


def forget_memory() -> None:
    """Drop the in-memory copy (the file stays): the next :func:`recall` reads the disk."""
    _MEMORY.clear()


def fastest(runs: dict, namespace: str, key):
    """The key of ``runs`` (a dict of callables) whose call takes the least GPU time.

    Each is measured briefly (one warm-up, at least 3 runs and 2 ms) the first time a
    ``(namespace, key)`` is seen on this device with this code; the choice is remembered
    (:func:`remember`) and later calls, in this process or another, answer at once.  A
    remembered choice that is not among ``runs`` any more is measured again.
    """
    full = [*device_fingerprint(), key]
    entry = recall(namespace, full)
    if entry is not None:
        for k in runs:
            if json.loads(json.dumps(k, default=list)) == entry.get("choice"):
                return k
    times = {k: time_gpu(fn, warmup=1, repeat=3, min_total_ms=2.0) for k, fn in runs.items()}
    best = min(times, key=times.get)
    remember(namespace, full, {"choice": best,
                               "timings": [[k, t] for k, t in times.items()]})
    return best
