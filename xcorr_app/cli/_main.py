"""The ``xcorr`` command-line app: the command group, its entry point and its error handling.

Every user error ends with one line ``error: ...`` on stderr and exit status 2; an interrupted
run (SIGINT, SIGTERM, SIGHUP) leaves no partial output (exit 128 + the signal: 130 for
Ctrl-C).  Set ``XCORR_DEBUG=1`` to see tracebacks.  The commands live beside this module:
``align`` (:mod:`._align`), ``filter`` (:mod:`._filter`), ``info`` (:mod:`._info`) and
``bench`` (:mod:`._bench`).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import sys
import warnings

import click

from .._config import debug
from .._version import __version__
from ..errors import XcorrError

__all__ = ["cli", "main", "run", "leave", "user_errors", "warnings_as_notes", "one_line_usage",
           "UsageLine", "COMMANDS", "DeviceCommand", "OnceCommand", "OnceGroup", "start_first_run"]

#: every command of ``xcorr``: name -> (module beside this one, the click command in it, the
#: one-line help ``xcorr --help`` lists).  A command's module is imported only when that command
#: runs (or shows its own help), so ``xcorr --help`` and a command's start pay for no other
#: command's imports (NumPy, the alignment stack: about 0.25 s); tests/cli/test_lazy_commands.py
#: checks each line against the command's own help.
COMMANDS = {
    "align": ("._align", "align",
              "Estimate the drift of every frame of PATH and write the aligned stack."),
    "filter": ("._filter", "filter_cmd", "Filter every frame of PATH and write a float32 stack."),
    "apply": ("._apply", "apply_cmd",
              "Apply the shifts of an earlier run to PATH and write the aligned stack."),
    "info": ("._info", "info",
             "Show the backend, the GPU, CuPy and the CUDA kernel sources found."),
    "bench": ("._bench", "bench",
              "Time xcorr's kernels against the peers on this GPU (CUDA events, medians)."),
    "tune": ("._tune", "tune_cmd",
             "Measure the planner's likeliest kernels for these problems and cache the choices."),
    "zlocate": ("._zlocate", "zlocate_cmd",
                "Find the depth of each frame of MOVIE in a z-stack (zlocate.csv, zlocate.png)."),
}


def warning_as_note(quiet: bool):
    """A :func:`warnings.showwarning` that prints a warning as one line ``note: ...`` on
    stderr (no source line), or nothing with ``--quiet``; from any thread."""
    def show(message, category, filename, lineno, file=None, line=None):
        if quiet:
            return
        text = (str(message).strip().splitlines() or [""])[0]
        click.echo(f"note: {category.__name__}: {text}", err=True)
    return show


#: the values of ``PYTHONWARNINGS`` this process set for the processes it starts, the
#: innermost block's last
_CHILDREN_WARNINGS = []


@contextlib.contextmanager
def _children_quiet(quiet: bool):
    """The Python processes the run starts (Dask's workers) print no warnings with
    ``--quiet``, and never the CPU fallback's, which this process notes once (unless the user
    set ``PYTHONWARNINGS``); the value before is restored at the end (a command's own block
    sits inside the group's)."""
    import os

    before = os.environ.get("PYTHONWARNINGS")
    if before is not None and before != (_CHILDREN_WARNINGS or [None])[-1]:
        yield  # (the user's)
        return
    _CHILDREN_WARNINGS.append("ignore" if quiet else "ignore:no usable GPU")
    os.environ["PYTHONWARNINGS"] = _CHILDREN_WARNINGS[-1]
    try:
        yield
    finally:
        _CHILDREN_WARNINGS.pop()
        if before is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = before


@contextlib.contextmanager
def warnings_as_notes(quiet: bool = False):
    """Inside the block, warnings are notes (:func:`warning_as_note`; none with ``quiet``), in
    this process and in the Python processes it starts; the CPU fallback's warning is left to
    the command, which says it its own way."""
    from .. import backend  # NumPy: only once a command runs

    with warnings.catch_warnings(), _children_quiet(quiet):
        warnings.simplefilter("ignore", category=backend.BackendFallbackWarning)
        warnings.filterwarnings("ignore", module="tifffile")
        if not debug():  # (a raw warning is two lines: file, line, then the source)
            warnings.showwarning = warning_as_note(quiet)
        yield


def _quiet_interrupts(hook):
    """``sys.unraisablehook`` that drops a stop signal's :class:`~xcorr_app.io.Interrupted`
    raised where Python cannot propagate it (a weakref callback, ``__del__``): the output run
    raises it again at its commit, so the user sees the one interrupted line, no traceback."""

    def quiet(unraisable):
        from ..io import Interrupted  # (loaded already: the exception is one of it)

        if not isinstance(unraisable.exc_value, Interrupted):
            hook(unraisable)

    return quiet


@contextlib.contextmanager
def user_errors(quiet: bool = False):
    """Turn user errors, interrupts and unexpected failures into one line and an exit code;
    warnings become notes (:func:`warnings_as_notes`; none with ``quiet``)."""
    tracebacks = debug()
    if not tracebacks:  # tifffile logs damaged files itself; our error line says it once
        logging.getLogger("tifffile").setLevel(logging.CRITICAL)
    unraisable = sys.unraisablehook
    if not tracebacks:
        sys.unraisablehook = _quiet_interrupts(unraisable)
    from ..io import stopped_by_signals
    from ._flags import say_later

    done = False
    try:
        with warnings_as_notes(quiet), stopped_by_signals():
            yield
        done = True
    except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
        raise  # click's own: usage errors and exit codes
    except XcorrError as exc:
        if tracebacks:
            raise
        from ._flags import as_flags

        click.echo(f"error: {as_flags(str(exc))}", err=True)  # (the API's names as flags)
        sys.exit(2)
    except KeyboardInterrupt as exc:
        # SIGINT, SIGTERM and SIGHUP (io.Interrupted carries the number): exit 128 + signal,
        # the shell's convention (130 for Ctrl-C)
        signum = getattr(exc, "signum", signal.SIGINT)
        click.echo(f"interrupted ({signal.Signals(signum).name}): no partial output was left "
                   "behind", err=True)
        sys.exit(128 + int(signum))
    except MemoryError as exc:  # an estimate fell short (the up-front check passed): exit 2
        if tracebacks:
            raise
        detail = f" ({exc})" if str(exc) else ""
        click.echo(f"error: out of memory{detail}: lower --chunk-frames or --max-memory (align: "
                   "bound the search with --max-shift, or add --no-verify)", err=True)
        sys.exit(2)
    except BrokenPipeError:
        # (the reader of the output went away, `xcorr info ... | head -1`: nothing to say to
        # it; stdout pointed at nothing, so that Python's own flush at exit stays quiet)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)  # (128 + SIGPIPE, as a shell reports a command a pipe stopped)
    except OSError as exc:
        if tracebacks:
            raise
        what = (f"{type(exc).__name__}: {exc}" if exc.filename is None  # (no path to name)
                else f"{exc.filename}: {exc.strerror or type(exc).__name__}")
        click.echo(f"error: {what}", err=True)
        sys.exit(1)
    except Exception as exc:  # a bug: still one line, with a pointer to the traceback
        if tracebacks:
            raise
        if isinstance(exc, RuntimeError) and "can't start new thread" in str(exc):
            # (the system refused a thread: a limit of the process, as out of memory is)
            click.echo("error: the system refused a new thread (a limit on memory or processes:"
                       " ulimit -v, -u): raise it, or lower --chunk-frames or --max-memory",
                       err=True)
            sys.exit(2)
        click.echo(f"internal error: {type(exc).__name__}: {exc} (rerun with XCORR_DEBUG=1 "
                   "for a traceback and report it)", err=True)
        sys.exit(1)
    finally:
        say_later(said=done)  # (a command that stopped: its error line alone)
        sys.unraisablehook = unraisable


class UsageLine(click.ClickException):
    """A usage error of click (bad option value, unknown option or command, missing argument)
    shown as one line ``error: ...``, exit status 2."""

    exit_code = 2

    def show(self, file=None):
        click.echo(f"error: {self.format_message()}", err=True)


@contextlib.contextmanager
def one_line_usage():
    """Turn click's usage errors (three lines: Usage, Try, Error) into one :class:`UsageLine`;
    ``xcorr`` or ``xcorr bench`` alone still print their help."""
    try:
        yield
    except click.exceptions.NoArgsIsHelpError:
        raise
    except click.exceptions.UsageError as exc:
        where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        raise UsageLine(exc.format_message().rstrip(".") + where) from None


class XcorrGroup(click.Group):
    """A command group whose subcommands (their options' parsing included) run under
    :func:`user_errors`, and whose usage errors, its own and its subcommands', are one line
    (:func:`one_line_usage`).  Its commands are those of :data:`COMMANDS`, each imported when
    it is first asked for (click's lazy group: :meth:`list_commands`, :meth:`get_command`)."""

    def list_commands(self, ctx):
        return sorted({**COMMANDS, **self.commands})

    def get_command(self, ctx, cmd_name):
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attribute, _ = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module, __package__), attribute)
            self.add_command(command, name=cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx, formatter):
        """The command list of ``--help`` from :data:`COMMANDS`' one-line helps: no command
        module is imported for it."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        # a stand-in with the registry's help shortens it as the command itself would
        rows = [(name, (self.commands.get(name) or click.Command(name, help=COMMANDS[name][2]))
                 .get_short_help_str(limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def make_context(self, info_name, args, parent=None, **extra):
        with one_line_usage():
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx):
        with one_line_usage(), user_errors():
            return super().invoke(ctx)


class OnceCommand(click.Command):
    """A command whose options that take one value are each given at most once: a second
    ``--kernel`` or ``--max-shift`` is a usage error (click keeps the last one given,
    silently).  Every command of ``xcorr`` is one (:class:`DeviceCommand`, ``info``, ``tune``,
    ``bench``'s: :class:`OnceGroup`)."""

    def make_parser(self, ctx):
        parser = super().make_parser(ctx)
        parse = parser.parse_args

        def parse_once(args):
            opts, rest, order = parse(args)  # (order: a parameter each time it was given)
            seen = set()
            for param in order:
                if not isinstance(param, click.Option) or param.multiple or param.count \
                        or param.is_flag:
                    continue
                if param.name in seen:
                    raise click.UsageError(f"{param.opts[0]} is given more than once, and it "
                                           "takes one value; give it once", ctx=ctx)
                seen.add(param.name)
            return opts, rest, order

        parser.parse_args = parse_once
        return parser


class OnceGroup(click.Group):
    """A group whose commands are :class:`OnceCommand`."""

    command_class = OnceCommand


class DeviceCommand(OnceCommand):
    """A command that computes on the GPU where one is usable (``--device``, ``--quiet``): once
    click has parsed its options, and before its callback imports the modules of its run, the
    GPU's first use starts from them (:func:`start_first_run`), and its warnings are notes
    (none with ``--quiet``)."""

    def invoke(self, ctx):
        from .._config import planner_mode, tune_requested
        from .._first_run import hold_gpu_warm_up

        # (the planner reads these on a GPU alone: a bad value is said on every device)
        planner_mode(), tune_requested()
        with warnings_as_notes(ctx.params.get("quiet", False)):
            try:
                start_first_run(self.name, ctx.params)
                return super().invoke(ctx)
            finally:  # (a process that runs commands in turn: the next one decides anew)
                hold_gpu_warm_up(False)


def start_first_run(command: str, params: dict) -> None:
    """Start what the GPU's first use needs (:mod:`xcorr_app._first_run`) from ``command``'s
    parsed options ``params``, so that it overlaps the imports of the command's run and the
    opening of its input: nothing for ``--device cpu``; for an ``align`` under device auto of a
    file small enough for a small job (:func:`~xcorr_app._first_run.small_job_file`; not 3-D,
    not spread out), the warm-up held, as the run will give that job to the CPU
    (:func:`~xcorr_app.backend.decide_device`); otherwise the warm-up (``align``: cuFFT too)
    and the contexts of the GPUs ``--gpus`` names."""
    from .._first_run import hold_gpu_warm_up, small_job_file, start_gpu_warm_up

    device, path = params.get("device", "auto"), params.get("path")
    if isinstance(path, tuple):  # (align's PATH...: one recording, or a session of several)
        path = path[0] if len(path) == 1 else None
    if device == "cpu":
        return
    spread = params.get("volumes") or params.get("gpus") is not None \
        or params.get("workers") is not None or params.get("scheduler")
    if command == "align" and device == "auto" and not spread and small_job_file(path):
        hold_gpu_warm_up()
        return
    if start_gpu_warm_up(fft=command == "align"):
        _start_named_gpus(command, params.get("gpus"), path)


def _start_named_gpus(command, spec, path):
    """``--gpus``: the contexts of the GPUs it names started too (``all``: where the file is
    large enough for ``align`` to use them all,
    :data:`~xcorr_app.streaming.SCALE_OUT_MIN_BYTES`)."""
    from .._first_run import start_cuda_drivers
    from ..streaming import SCALE_OUT_MIN_BYTES

    if spec is None:
        return
    if spec.strip() == "all":
        try:
            small = command == "align" and os.path.getsize(path) < SCALE_OUT_MIN_BYTES
        except (OSError, TypeError, ValueError):
            small = True  # (a folder or a store: its size is not told so cheaply)
        if not small:
            start_cuda_drivers()
        return
    try:
        start_cuda_drivers([int(t) for t in spec.split(",") if t.strip()])
    except ValueError:  # (the option's own check says what is wrong)
        pass


@click.group(cls=XcorrGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="xcorr")
def cli():
    """Register (align) and filter image stacks by cross-correlation, on NVIDIA GPUs or the CPU.

    \b
    Quick start:
      xcorr align sample_data/cell_drift.tif --out cell_aligned
      xcorr filter stack.tif --kernel gaussian:2 --out smooth.tif
      xcorr info
    """



def main():
    """The ``xcorr`` command (raises :class:`SystemExit` with its status, as click does)."""
    cli(prog_name="xcorr")


def run():
    """The ``xcorr`` process (the console script and ``python -m xcorr_app.cli``): :func:`main`,
    then :func:`leave` where CuPy was imported."""
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    # (here, outside the except: the exception and the frames it held are gone, so what they
    # kept open, generators of chunks among them, has been closed)
    leave(code)
    sys.exit(code)


def leave(code) -> None:
    """End a process that imported CuPy the way Python would, less the interpreter's teardown:
    the threads' end and the ``atexit`` handlers run, the output is flushed, then
    ``os._exit``.  CuPy's pools, plans and modules freed one by one at teardown cost a GPU
    process a noticeable part of its exit; the driver frees them all with the
    process.  Nothing to do (a normal exit) without CuPy, with ``XCORR_DEBUG`` or where the
    exit code is not a number.  An output that cannot be flushed (a closed pipe, a full disk)
    is noted on stderr and ends a successful run with status 120, as Python's own exit does."""
    import os
    import threading

    if "cupy" not in sys.modules or debug() or not isinstance(code, (int, type(None))) \
            or not hasattr(threading, "_shutdown"):
        return
    import atexit

    threading._shutdown()  # (what the interpreter does first: the thread pools' end, joins)
    atexit._run_exitfuncs()
    status = code or 0
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception as exc:  # noqa: BLE001 - (reported as Python reports it)
            with contextlib.suppress(Exception):
                os.write(2, f"Exception ignored on flushing {getattr(stream, 'name', 'a stream')}: "
                            f"{exc!r}\n".encode())
            status = status or 120
    os._exit(status)
