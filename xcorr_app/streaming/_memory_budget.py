"""How many frames a step of the pipeline may hold: ``--max-memory`` and the automatic cap.

The estimate counts, per frame, the host ring of read-ahead buffers and the device working set
of one chunk (float32 copies, FFTs, correlation surfaces and their float64 normalization
temporaries).  It is deliberately generous: the point is that a stack of any length, and frames
of any size, run in bounded memory.

Examples
--------
>>> parse_memory("1.5G"), parse_memory("512M"), parse_memory("4096")
(1610612736, 536870912, 4096)
>>> chunk_frames_for((256, 256), 2, (33, 33), budget=parse_memory("1G"), limit=64)
64
"""

from __future__ import annotations

import re

from ..errors import InputError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
#: chunks read ahead of the one being computed (the host ring holds one more)
READ_AHEAD = 2
#: bytes per frame pixel on the device: float32 frames (raw, filtered, windowed), their FFTs
#: for the reference measurement, summed-area tables (float64) and temporaries
DEVICE_BYTES_PER_PIXEL = 96
#: bytes per correlation output: the float32 surface, float64 normalization temporaries and
#: the local-maximum masks of the confidence measure
DEVICE_BYTES_PER_OUTPUT = 112
#: share of the free device memory the automatic cap uses
AUTO_DEVICE_SHARE = 0.5


def parse_memory(spec) -> int:
    """``"800M"``, ``"2G"``, ``"1.5G"``, ``"4096"`` (bytes; K, M, G, T are powers of 1024)."""
    if isinstance(spec, (int, float)):
        value = int(spec)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)i?B?\s*", str(spec), re.IGNORECASE)
        if m is None:
            raise InputError(f"cannot read memory size {spec!r}: use e.g. 512M, 2G or 1.5G")
        value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value <= 0:
        raise InputError(f"memory size must be positive, got {spec!r}")
    return value


def human(n: int) -> str:
    """``1536 -> "1.5 KiB"``."""
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} GiB"


def frame_bytes(frame_shape, itemsize, surface_shape) -> tuple[int, int]:
    """(host, device) bytes one frame of a chunk needs."""
    h, w = frame_shape
    host = (READ_AHEAD + 1) * h * w * itemsize
    device = (itemsize * h * w + DEVICE_BYTES_PER_PIXEL * h * w
              + DEVICE_BYTES_PER_OUTPUT * surface_shape[0] * surface_shape[1])
    return host, device


def chunk_frames_for(frame_shape, itemsize, surface_shape, *, budget=None, limit=64,
                     device_free=None) -> int:
    """Frames per chunk: at most ``limit``, within ``budget`` bytes (host + device) and within
    :data:`AUTO_DEVICE_SHARE` of ``device_free``; an error when one frame does not fit."""
    host, device = frame_bytes(frame_shape, itemsize, surface_shape)
    n = int(limit)
    if budget is not None:
        fit = int(budget // (host + device))
        if fit < 1:
            raise InputError(f"--max-memory {human(budget)} is too small for frames of "
                             f"{frame_shape[0]}x{frame_shape[1]}: one frame needs about "
                             f"{human(host + device)}; raise it or bound the search with "
                             "--max-shift")
        n = min(n, fit)
    if device_free is not None:
        n = min(n, max(1, int(AUTO_DEVICE_SHARE * device_free // device)))
    return max(1, n)
