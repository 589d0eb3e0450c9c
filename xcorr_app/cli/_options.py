"""The options of the ``xcorr`` commands: parameter types for the spec mini-languages, the
choices (taken from the modules that define them), and the option groups that several commands
share, declared once.

Every choice list of the command line comes from here, and here from the module that owns it.

Examples
--------
>>> MAX_SHIFT.convert("8", None, None), MAX_SHIFT.convert("4,6", None, None)
(8, (4, 6))
>>> MEMORY.convert("2G", None, None)
'2G'
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from pathlib import Path

import click

from .. import backend
from ..errors import InputError
from ._flags import as_flags, note_later, say_later
from ..streaming import SCALE_OUT_MIN_BYTES
# the choices of the command line, from their one home each
from ..alignment import FIELD_RESAMPLE, NORMALIZATIONS, RESAMPLE, SUBPIXEL, WINDOWS
from ..filters import MODES

__all__ = ["NORMALIZATIONS", "SUBPIXEL", "WINDOWS", "RESAMPLE", "RESAMPLE_ANY", "FIELD_RESAMPLE",
           "MODES", "MAX_SHIFT", "MEMORY", "PATCHES",
           "GPUS_LIST", "Spec", "DEVICE", "CHANNEL", "FORCE", "QUIET", "CHUNK", "stack_command",
           "scale_out_command", "json_rows_option", "scale_out", "where", "print_notes",
           "note_device", "note_cpu_fallback", "progress_bar", "default_out", "planner_notes",
           "READABLE", "readable_frames_of"]


# ------------------------------------------------------------------------- parameter types

class MaxShiftType(click.ParamType):
    """``N`` or ``SY,SX`` (non-negative integers) -> ``int`` or ``(int, int)``."""

    name = "max-shift"

    def get_metavar(self, param, ctx=None):
        return "N|SY,SX"

    def convert(self, value, param, ctx):
        if value is None or isinstance(value, (int, tuple)):
            return value
        try:
            parts = [int(v) for v in str(value).split(",")]
        except ValueError:
            parts = []
        if len(parts) not in (1, 2) or min(parts) < 0:
            raise InputError(f"--max-shift takes N or SY,SX (non-negative integers), got "
                             f"{value!r}")
        return parts[0] if len(parts) == 1 else tuple(parts)


class PatchesType(click.ParamType):
    """``GYxGX`` (or ``N``: N x N) patches -> ``(gy, gx)``
    (:func:`~xcorr_app.alignment.piecewise._patches.parse_patches`)."""

    name = "patches"

    def get_metavar(self, param, ctx=None):
        return "GYxGX"

    def convert(self, value, param, ctx):
        from ..alignment import parse_patches

        if value is None or isinstance(value, tuple):
            return value
        return parse_patches(int(value) if str(value).isdigit() else str(value))


class WorkersType(click.ParamType):
    """``--workers N``: a whole number (what this host can run is checked once, where the
    cluster would start: :func:`~xcorr_app.streaming.check_workers`)."""

    name = "integer"

    def convert(self, value, param, ctx):
        if value is None or isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return int(str(value).strip())
        except ValueError:
            self.fail(f"{value!r} is not a whole number", param, ctx)


class MemoryType(click.ParamType):
    """A memory size (``512M``, ``2G``, ``1.5G``): checked here, passed on as written."""

    name = "size"

    def get_metavar(self, param, ctx=None):
        return "SIZE"

    def convert(self, value, param, ctx):
        from ..streaming import parse_memory

        if value is not None:
            # (a bad size fails before anything is read, naming the option)
            parse_memory(value, f"--{param.name.replace('_', '-')}" if param else "size")
        return value


class Spec(click.ParamType):
    """A spec of a mini-language (``gaussian:1``, ``dog:1,4``, ``FILE.npy``...), passed on as
    written; ``check`` (optional) raises for a bad one before anything is read."""

    name = "spec"

    def __init__(self, metavar, check=None):
        self.metavar, self.check = metavar, check

    def get_metavar(self, param, ctx=None):
        return self.metavar

    def convert(self, value, param, ctx):
        if value is not None and self.check is not None:
            self.check(value)
        return value


MAX_SHIFT = MaxShiftType()
PATCHES = PatchesType()
#: every resampling of aligned.tif: the rigid shifts' (bilinear, fourier) and the motion
#: field's (bilinear, cubic)
RESAMPLE_ANY = tuple(dict.fromkeys(RESAMPLE + tuple(FIELD_RESAMPLE)))
MEMORY = MemoryType()
#: ``--gpus``: checked against this host in :func:`scale_out` (after the device is known)
GPUS_LIST = Spec("LIST|all")
REFERENCE = Spec("first|mean[:N]|previous|INDEX|FILE")
# (passed on as written: the run's options parse them, once)
PREFILTER = Spec("auto|gaussian:S|dog:S1,S2|none")
BIDI = Spec("auto|off|PX")
WINDOW = Spec("|".join(WINDOWS[:-1]) + f"|{WINDOWS[-1]}[:A]")
FEATURES = Spec("dog:S1,S2,...|gabor:SIGMA,N|FILE.npy")
KERNEL = Spec("gaussian:SIGMA|box:N|sobel[:AXIS]|laplace|dog:S1,S2|FILE.npy")
BANK = Spec("dog:S1,S2,...|gabor:SIGMA,N[,L]|FILE.npy")
MIX = Spec("luma|FILE.npy")


# ------------------------------------------------------------------------- shared options

#: ``--device``: a command with it is a :class:`~xcorr_app.cli._main.DeviceCommand` (the GPU's
#: first use started from its parsed value)
DEVICE = click.option("--device", type=click.Choice(backend.DEVICES), default="auto",
                      show_default=True,
                      help="Where to compute: GPU when usable (auto), gpu or cpu.")
CHANNEL = click.option("--channel", type=int, default=None,
                       help="Channel to use from multi-channel files (0-based).")
FORCE = click.option("--force", is_flag=True, help="Overwrite existing outputs.")
QUIET = click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
READABLE = click.option("--readable-frames", is_flag=True,
                        help="For a truncated or damaged TIFF file, use the frames before the "
                             "break (with a warning) instead of stopping.")
CHUNK = click.option("--chunk-frames", type=click.IntRange(min=1), default=None,
                     help="Frames processed at once (bounds memory use). Default 64; align on "
                          "the GPU: as many small frames as 256 MiB of float32 pixels hold "
                          "(256 of 512x512), at most 1024.")
GPUS = click.option("--gpus", type=GPUS_LIST, default=None,
                    help="Share the frames out over these GPUs of this host, e.g. 0,1 (one "
                         "reader per GPU; no cluster needed).")
WORKERS = click.option("--workers", type=WorkersType(), default=None, metavar="N",
                       help="Run on a local Dask cluster of N workers (one per GPU with "
                            "dask-cuda, else at most one per CPU core); needs "
                            "xcorr-app[dask].")
SCHEDULER = click.option("--scheduler", default=None, metavar="ADDRESS",
                         help="Run on an existing Dask cluster, e.g. tcp://host:8786; every "
                              "worker must be able to read PATH.")


def _apply(fn, options):
    for option in options:
        fn = option(fn)
    return fn


def scale_out_command(fn):
    """The options that spread a command over several GPUs or a Dask cluster."""
    return _apply(fn, (SCHEDULER, WORKERS, GPUS))


def stack_command(fn):
    """The options every stack command (``align``, ``filter``) shares."""
    return _apply(fn, (QUIET, FORCE, READABLE, CHUNK, DEVICE, CHANNEL))


def json_rows_option(what=""):
    """The ``--json FILE`` option of the benchmarks."""
    return click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
                        help=f"Also write the rows {what + ' ' if what else ''}to this JSON "
                             "file.")


# ------------------------------------------------------------------------- shared helpers

def one_gpu_instead(gpus, workers, stack_bytes):
    """The note saying why ``--gpus all`` / ``--workers N`` run on one GPU here, or None."""
    if stack_bytes is None or stack_bytes >= SCALE_OUT_MIN_BYTES:
        return None
    asked = "--gpus all" if gpus == "all" else f"--workers {workers}" if workers else None
    if asked is None:
        return None
    how = "--gpus 0,1 (a list) uses several GPUs anyway" if gpus else \
        "--scheduler ADDRESS runs on a cluster of yours anyway"
    return (f"note: {asked}: measuring on one GPU in this process: a stack of "
            f"{stack_bytes / 2**30:.1f} GiB does not pay for starting more (below "
            f"{SCALE_OUT_MIN_BYTES // 2**30} GiB, measured in docs/performance.md); {how}")


@contextlib.contextmanager
def scale_out(gpus, workers, scheduler, device, stack_bytes=None, quiet=False):
    """``(client, gpus)`` for the run: a Dask client (``--workers``/``--scheduler``), GPU ids
    (``--gpus``), or neither.  With ``stack_bytes`` (``align``), ``--gpus all`` and
    ``--workers N`` run on one GPU in this process below :data:`SCALE_OUT_MIN_BYTES`."""
    if gpus is not None and (workers is not None or scheduler):
        raise InputError("--gpus runs without Dask; give either --gpus or --workers/--scheduler")
    if workers is not None and scheduler:
        raise InputError("give either --workers (a new local cluster) or --scheduler (an "
                         "existing one), not both")
    if gpus is not None and device == "cpu":
        raise InputError("--gpus runs on GPUs; drop --device cpu")
    if gpus is not None:
        from ..streaming import need_gpus

        need_gpus()
    # (without a GPU, --workers N runs its Dask cluster on the CPU as asked)
    note = None if device == "cpu" or (gpus is None and workers is None) \
        or not backend.gpu_available() else one_gpu_instead(gpus, workers, stack_bytes)
    if note is not None:
        if not quiet:
            click.echo(note, err=True)
        yield None, None
        return
    if gpus is not None:
        from ..streaming import parse_gpus

        yield None, parse_gpus(gpus)
        return
    if workers is None and not scheduler:
        yield None, None
        return
    from ..distributed import local_client

    # the cluster's processes log at INFO by default: keep the terminal to our progress bar
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
    logging.getLogger("distributed").setLevel(logging.ERROR)
    with local_client(workers, scheduler) as client:
        yield client, None


def where(dev, client, gpu_ids) -> str:
    """Where a run computed, for its summary line."""
    if client is not None:
        n = len(client.scheduler_info(n_workers=-1).get("workers", {}))
        return f"a Dask cluster of {n} worker{'s' if n != 1 else ''}"
    if gpu_ids is not None:
        return "GPUs " + ",".join(map(str, gpu_ids))
    return dev


def print_notes(src, quiet):
    """Tell the user what the reader noticed (skipped files, extra series); a warning (the
    frames of a truncated file left out) is said even with ``--quiet``."""
    say_later()
    for note in src.notes:
        if note.startswith("warning: "):
            click.echo(as_flags(note), err=True)
        elif not quiet:
            click.echo(f"note: {as_flags(note)}", err=True)


def readable_frames_of(path, readable, workers, scheduler):
    """``--readable-frames``: the block in which a truncated ``path`` gives its whole frames
    (every open in this process, :func:`xcorr_app.io._tiff.readable_frames`)."""
    if not readable:
        return contextlib.nullcontext()
    if workers is not None or scheduler:
        raise InputError("--readable-frames reads the file in this process only; drop "
                         "--workers/--scheduler (--gpus works)")
    from ..io import readable_frames, split_source

    return readable_frames(split_source(path)[0])  # (FILE?z=K&axes=A: its file)


def note_device(device: str, quiet: bool) -> str:
    """Resolve the device; say once when ``auto`` falls back to the CPU."""
    dev = backend.resolve_device(device)
    if device == "auto" and dev == "cpu":
        note_cpu_fallback(quiet)
    return dev


def note_cpu_fallback(quiet: bool) -> None:
    """Say that device ``auto`` runs on the CPU for want of a usable GPU, and why (the
    probe's answer), unless quiet."""
    if not quiet:  # (after the command's checks: a refused command is its error line)
        note_later(f"note: no usable GPU ({backend.gpu_unavailable_reason()}); running on the "
                   "CPU")


#: the bars' lock: threads share it (no bar is drawn from another process)
_THREAD_LOCK = threading.RLock()


def progress_bar(total, desc, quiet):
    """A tqdm bar on stderr counting frames (off with ``--quiet``)."""
    from tqdm import tqdm

    say_later()  # (the work starts: its checks passed)
    tqdm.set_lock(_THREAD_LOCK)  # (its default lock starts multiprocessing's: 0.1 s)
    return tqdm(total=total, desc=desc, unit="frame", disable=quiet or None, leave=False,
                file=sys.stderr, dynamic_ncols=True)


def default_out(path: Path, suffix: str) -> Path:
    """``./STEM<suffix>`` in the current folder, whatever folder the input is in: results go
    where the user runs the command, never into the input's folder (the bundled samples', a
    shared or read-only one).  ``stack.tif`` -> ``stack<suffix>``, a folder of TIFFs
    ``frames/`` -> ``frames<suffix>``, a source path ``FILE:/DATASET`` -> FILE's stem.

    >>> default_out(Path("/data/run1/stack.ome.tif"), "_xcorr")
    PosixPath('stack.ome_xcorr')
    """
    from ..io import split_source

    path = split_source(path)[0]
    return Path(f"{path.resolve().name if path.is_dir() else path.stem}{suffix}")


def planner_notes(quiet=False):
    """Print the planner's one line before a (slow, first-time) measurement, unless quiet."""
    from ..correlate import set_on_measure

    set_on_measure(None if quiet else (lambda line: click.echo(line, err=True)))
