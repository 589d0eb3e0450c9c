"""What the benchmarks share: timing several paths in turns, the torch check, table cells,
the header's date and versions, and freeing GPU memory between rows.

Versions come from :func:`xcorr_app._environment.versions` and device names from
:func:`xcorr_app._cuda.timing.device_name` (that is, :func:`xcorr_app.backend.gpu_name`).

Examples
--------
>>> fmt_ms(1234.5), fmt_ms(0.01234), fmt_ms(None)
('1234', '0.0123', 'n/a')
>>> cell("a|b")
'a\\\\|b'
>>> parse_size("2048", 31), parse_size("512x1024", 31)
((2048, 2048), (512, 1024))
>>> reason(ValueError("bad thing\\nmore"))
'ValueError: bad thing'
"""

from __future__ import annotations

import time

import datetime
import statistics
import sys

from ..errors import InputError

__all__ = ["TIMING", "ROUNDS", "measure_paths", "relative_error", "torch_unavailable_reason",
           "free_gpu_memory", "reason", "fmt_ms", "cell", "versions_line", "utc_now",
           "markdown_header", "parse_size"]

#: arguments of :func:`xcorr_app._cuda.timing.time_gpu`, per round
TIMING = {"warmup": 3, "repeat": 15, "min_total_ms": 20.0}
#: rounds of timing: the paths take turns, and each path's time is the median of its rounds
ROUNDS = 3
#: how the header names a library whose module name differs
LABELS = {"skimage": "scikit-image"}


def timed(fn):
    """``(seconds, fn())``, by wall clock (``time.perf_counter``)."""
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def warm_median(fn, repeat):
    """``(median seconds, last result)`` of ``repeat`` calls of ``fn`` by wall clock, after an
    untimed first call (kernels, plans, the planner warm)."""
    result = fn()
    times = []
    for _ in range(repeat):
        seconds, result = timed(fn)
        times.append(seconds)
    return float(statistics.median(times)), result


def relative_error(got, want) -> float:
    """``max |got - want| / max |want|`` on the device (inf for a shape mismatch, NaN stays)."""
    import cupy as cp

    if tuple(got.shape) != tuple(want.shape):
        return float("inf")
    scale = max(float(cp.abs(want).max()), 1e-30)
    return float(cp.abs(got.astype(cp.float64) - want).max()) / scale


def reason(exc: BaseException) -> str:
    """One line saying why a path failed."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def measure_paths(makers, wants, missing, rounds=None):
    """Build each path with its maker, check it once, then time all of them in turns.

    Parameters
    ----------
    makers : dict
        Path name -> ``make()`` returning the path's callable (or None when it is missing).
    wants, missing : dict
        Path name -> the reference output to check against (or None), and the note for a
        missing path.
    rounds : int, optional
        Rounds of timing (default :data:`ROUNDS`): each round times every path once with
        :data:`TIMING`, and a path's time is the median of its rounds.  Taking turns keeps a
        drift of the machine (other tenants, clocks) from favouring the path timed first.

    Returns
    -------
    (ms, rel_error, na) : dict, dict, dict
        Per path: ``ms`` is None when the path is missing (``na`` is its ``missing`` note) or
        failed (``na`` says why); ``rel_error`` is None without a reference.  Exceptions do
        not propagate: a failing peer is a table entry.
    """
    from .._cuda import time_gpu

    fns, ms, errs, nas = {}, {}, {}, {}
    for path, make in makers.items():
        ms[path], errs[path], nas[path] = None, None, ""
        try:
            fn = make()
            if fn is None:
                nas[path] = missing.get(path, "not available")
                continue
            want = wants.get(path)
            errs[path] = None if want is None else relative_error(fn(), want)
            fns[path] = fn
        except Exception as exc:  # noqa: BLE001 - e.g. cuDNN out of memory: reported, not fatal
            nas[path] = reason(exc)
    samples = {path: [] for path in fns}
    for _ in range(ROUNDS if rounds is None else rounds):
        for path, fn in fns.items():
            if path not in samples:
                continue
            try:
                samples[path].append(time_gpu(fn, **TIMING))
            except Exception as exc:  # noqa: BLE001
                nas[path] = reason(exc)
                del samples[path]
    for path, times in samples.items():
        ms[path] = statistics.median(times)
    return ms, errs, nas


def torch_unavailable_reason() -> str:
    """Empty when PyTorch with CUDA can run the torch peers, else why not."""
    try:
        import torch
    except Exception as exc:
        return f"torch not importable ({type(exc).__name__})"
    if not torch.cuda.is_available():
        return "torch has no CUDA"
    return ""


def free_gpu_memory():
    """Give CuPy's (and PyTorch's, when loaded) cached GPU memory back between rows (nothing
    where no GPU is usable)."""
    from .. import backend

    if not backend.gpu_available():
        return
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


def fmt_ms(ms) -> str:
    """Milliseconds for a table cell: 3 significant digits, whole numbers from 1000 on."""
    if ms is None:
        return "n/a"
    return f"{ms:.0f}" if ms >= 1000 else f"{ms:.3g}"


def cell(text) -> str:
    """A Markdown table cell (``|`` escaped)."""
    return str(text).replace("|", "\\|")


def markdown_header(columns) -> str:
    """The two Markdown header lines of a table of ``columns``."""
    return "| " + " | ".join(columns) + " |\n|" + " --- |" * len(columns)


def versions_line(libraries=("cupy", "torch")) -> str:
    """``xcorr 1.2, cupy 13.3, torch missing``: xcorr's and the libraries' versions."""
    from .._environment import versions

    found = versions(tuple(libraries))
    return ", ".join(f"{LABELS.get(name, name)} {found[name]}"
                     for name in ("xcorr", *libraries))


def utc_now() -> str:
    """The date of a run, for the header: ``2026-01-31 12:00 UTC``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def parse_size(text, min_side=1) -> tuple:
    """``"H"`` or ``"HxW"`` (``--size``) -> ``(h, w)``; each side at least ``min_side``."""
    try:
        parts = [int(v) for v in str(text).lower().split("x")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts) < min_side:
        raise InputError(f"--size takes H or HxW (integers >= {min_side}), got {text!r}")
    return (parts[0], parts[-1])


def report(echo, table, targets, json_path=None, doc=None) -> None:
    """Print a benchmark's ``table`` and ``targets`` lines (after a blank line); with
    ``json_path``, write ``doc`` (with the targets) there as JSON."""
    import json

    from ..io import write_text

    echo("")
    for line in [*table, "", *targets]:
        echo(line)
    if json_path is not None:
        write_text(json_path, json.dumps({**(doc or {}), "targets": targets}, indent=1))
