"""The ``xcorr`` command-line app.

Every user error ends with one line ``error: ...`` on stderr and exit status 2; an interrupted
run leaves no partial output (exit 130).  Set ``XCORR_DEBUG=1`` to see tracebacks.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import time
import warnings
from pathlib import Path

import click

from .._version import __version__
from .. import backend
from ..errors import XcorrError
from ..filters._api import MODES

DEVICE = click.option("--device", type=click.Choice(backend.DEVICES), default="auto",
                      show_default=True, help="Where to compute: GPU when usable (auto), gpu or cpu.")
CHANNEL = click.option("--channel", type=int, default=None,
                       help="Channel to use from multi-channel files (0-based).")
FORCE = click.option("--force", is_flag=True, help="Overwrite existing outputs.")
QUIET = click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary.")
CHUNK = click.option("--chunk-frames", type=click.IntRange(min=1), default=64, show_default=True,
                     help="Frames processed at once (bounds memory use).")


GPUS = click.option("--gpus", default=None, metavar="LIST|all",
                    help="Share the frames out over these GPUs of this host, e.g. 0,1 (one "
                         "reader per GPU; no cluster needed).")
WORKERS = click.option("--workers", type=int, default=None, metavar="N",
                       help="Run on a local Dask cluster of N workers (one per GPU with "
                            "dask-cuda); needs xcorr-app[dask].")
SCHEDULER = click.option("--scheduler", default=None, metavar="ADDRESS",
                         help="Run on an existing Dask cluster, e.g. tcp://host:8786; every "
                              "worker must be able to read PATH.")


def scale_out_command(fn):
    """The options that spread a command over several GPUs or a Dask cluster."""
    for option in (SCHEDULER, WORKERS, GPUS):
        fn = option(fn)
    return fn


@contextlib.contextmanager
def scale_out(gpus, workers, scheduler, device):
    """``(client, gpus)`` for the run: a Dask client (``--workers``/``--scheduler``), GPU ids
    (``--gpus``), or neither."""
    if gpus is not None and (workers is not None or scheduler):
        raise XcorrError("--gpus runs without Dask; give either --gpus or --workers/--scheduler")
    if workers is not None and scheduler:
        raise XcorrError("give either --workers (a new local cluster) or --scheduler (an "
                         "existing one), not both")
    if gpus is not None:
        if device == "cpu":
            raise XcorrError("--gpus runs on GPUs; drop --device cpu")
        from ..distributed._multi_gpu import parse_gpus

        yield None, parse_gpus(gpus)
        return
    if workers is None and not scheduler:
        yield None, None
        return
    from ..distributed._dask import local_client

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


def json_rows_option(what=""):
    """The ``--json FILE`` option of the benchmarks."""
    return click.option("--json", "json_path", type=click.Path(path_type=Path), default=None,
                        help=f"Also write the rows {what + ' ' if what else ''}to this JSON "
                             "file.")


def stack_command(fn):
    """The options every stack command shares, and the user-error handling."""
    for option in (user_errors, QUIET, FORCE, CHUNK, DEVICE, CHANNEL):
        fn = option(fn)
    return fn


def print_notes(src, quiet):
    """Tell the user what the reader noticed (skipped files, extra series)."""
    for note in src.notes:
        if not quiet:
            click.echo(f"note: {note}", err=True)


def user_errors(fn):
    """Turn user errors, interrupts and unexpected failures into one line and an exit code."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        debug = bool(os.environ.get("XCORR_DEBUG"))
        if not debug:  # tifffile logs damaged files itself; our error line says it once
            logging.getLogger("tifffile").setLevel(logging.CRITICAL)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", category=backend.BackendFallbackWarning)
                warnings.filterwarnings("ignore", module="tifffile")
                return fn(*args, **kwargs)
        except XcorrError as exc:
            if debug:
                raise
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("interrupted: no partial output was left behind", err=True)
            sys.exit(130)
        except (MemoryError, OSError) as exc:
            if debug:
                raise
            click.echo(f"error: {type(exc).__name__}: {exc}", err=True)
            sys.exit(1)
        except Exception as exc:  # a bug: still one line, with a pointer to the traceback
            if debug:
                raise
            click.echo(f"internal error: {type(exc).__name__}: {exc} (rerun with XCORR_DEBUG=1 "
                       "for a traceback and report it)", err=True)
            sys.exit(1)
    return wrapper


def note_device(device: str, quiet: bool) -> str:
    """Resolve the device; say once when ``auto`` falls back to the CPU."""
    dev = backend.resolve_device(device)
    if device == "auto" and dev == "cpu" and not quiet:
        click.echo(f"note: no usable GPU ({backend.gpu_unavailable_reason()}); running on the CPU",
                   err=True)
    return dev


def progress_bar(total, desc, quiet):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="frame", disable=quiet or None, leave=False,
                file=sys.stderr, dynamic_ncols=True)


def parse_max_shift(value):
    if value is None:
        return None
    try:
        parts = [int(v) for v in value.split(",")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts) < 0:
        raise XcorrError(f"--max-shift takes N or SY,SX (non-negative integers), got {value!r}")
    return parts[0] if len(parts) == 1 else tuple(parts)


def default_out(path: Path, suffix: str) -> Path:
    path = Path(path)
    return path.parent / f"{path.stem if path.is_file() else path.name}{suffix}"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="xcorr")
def cli():
    """Register (align) and filter image stacks by cross-correlation, on NVIDIA GPUs or the CPU.

    \b
    Quick start:
      xcorr align sample_data/cell_drift.tif --out aligned_cell
      xcorr filter stack.tif --kernel gaussian:2 --out smooth.tif
      xcorr info
    """


@cli.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--reference", default="first", show_default=True,
              help="first | mean | mean:N (of the first N frames) | previous (frame to frame, "
                   "accumulated) | a frame INDEX | an image FILE.")
@click.option("--max-shift", default=None, metavar="N|SY,SX",
              help="Search shifts only up to N pixels (the planner picks the warp-shuffle "
                   "kernels or FFT); default: up to half the frame, by FFT.")
@click.option("--normalization", type=click.Choice(["zncc", "none", "phase"]), default="zncc",
              show_default=True,
              help="zncc: zero-normalized per shift over the overlap; none: mean-subtracted "
                   "sums; phase: phase correlation (FFT).")
@click.option("--subpixel", type=click.Choice(["gaussian", "parabolic", "gaussian3", "parabolic3",
                                              "upsample", "none"]),
              default="gaussian", show_default=True,
              help="Subpixel refinement: 2-D fit on the 3x3 peak neighbourhood (gaussian, "
                   "parabolic), 3-point fits per axis (...3), or upsampled DFT (upsample).")
@click.option("--upsample", type=click.IntRange(min=1), default=20, show_default=True,
              help="Upsampling factor for --subpixel upsample (resolution 1/K px).")
@click.option("--prefilter", default="gaussian:1", show_default=True,
              metavar="gaussian:S|dog:S1,S2|none", help="Filter frames before correlating.")
@click.option("--window", default="none", show_default=True, metavar="none|hann|tukey[:A]",
              help="Apodize frames before correlating (suppresses edge effects).")
@click.option("--features", default=None, metavar="dog:S1,S2,...|gabor:SIGMA,N|FILE.npy",
              help="Register on the local energy of this filter bank (im2win or, for 3x3 "
                   "filters, Winograd kernel) instead of the prefiltered frames.")
@click.option("--min-confidence", type=click.FloatRange(min=0), default=None,
              help="Flag frames whose peak / second peak is below this.")
@click.option("--interpolate-low", is_flag=True,
              help="Give flagged frames shifts interpolated from their neighbours.")
@click.option("--max-memory", default=None, metavar="SIZE",
              help="Cap on memory held at once, e.g. 2G (host buffers + GPU working set); "
                   "default: half the free GPU memory. Results do not depend on it.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Output folder [default: PATH_xcorr beside the input].")
@click.option("--resample", type=click.Choice(["bilinear", "fourier"]), default="bilinear",
              show_default=True, help="How aligned.tif is resampled at subpixel shifts.")
@click.option("--crop", is_flag=True,
              help="Crop aligned.tif to the area every shifted frame covers.")
@click.option("--fill", type=float, default=0.0, show_default=True,
              help="Value for pixels shifted in from outside the frame (without --crop).")
@click.option("--no-verify", is_flag=True, help="Skip the FFT reference measurement (faster).")
@click.option("--no-aligned", is_flag=True, help="Do not write aligned.tif.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@scale_out_command
@stack_command
def align(path, reference, max_shift, normalization, subpixel, upsample, prefilter, window,
          features, min_confidence, interpolate_low, max_memory, out_dir, resample, crop, fill, no_verify,
          no_aligned, as_json, gpus, workers, scheduler, channel, device, chunk_frames, force,
          quiet):
    """Estimate the drift of every frame of PATH and write the aligned stack.

    PATH is a multi-page TIFF (ImageJ hyperstacks and OME-TIFF included) or a folder of TIFFs;
    it is streamed, so it may be larger than the GPU's or the host's memory. Writes shifts.csv,
    shifts.json, aligned.tif and drift.png into the output folder. Shifts are (dy, dx) to apply
    to each frame to align it with the reference, as in scikit-image.
    """
    from ..alignment._pipeline import align as run_align, apply_shifts, common_area
    from ..alignment._memory_budget import parse_memory
    from ..io._writer import TiffStackWriter, prepare_outputs, write_text
    from ..io._plot import plot_drift
    from ..io._reader import open_stack

    quiet = quiet or as_json
    out_dir = out_dir or default_out(path, "_xcorr")
    outputs = {k: out_dir / k for k in ("shifts.csv", "shifts.json", "drift.png")}
    if not no_aligned:
        outputs["aligned.tif"] = out_dir / "aligned.tif"
    ms = parse_max_shift(max_shift)
    if max_memory is not None:
        parse_memory(max_memory)  # a bad size fails before anything is read
    if interpolate_low and min_confidence is None:
        raise XcorrError("--interpolate-low needs --min-confidence to know which frames to "
                         "replace")
    # every option checked before a cluster starts or an output folder is made
    from ..alignment._pipeline import AlignOptions
    from ..alignment._references import mean_count

    AlignOptions(reference, ms, normalization, subpixel, upsample, prefilter, window,
                 not no_verify, min_confidence, interpolate_low, channel, features)
    mean_count(reference, 1)
    dev = note_device(device, quiet)
    _planner_notes(quiet)
    with open_stack(path, channel=channel) as src:  # fail early on a bad input
        n, shape, itemsize = src.n_frames, src.frame_shape, src.dtype.itemsize
        print_notes(src, quiet)
    frame_gb = shape[0] * shape[1] * itemsize / 1e9
    options = dict(max_shift=ms, normalization=normalization, subpixel=subpixel,
                   upsample=upsample, prefilter=prefilter, window=window, verify=not no_verify,
                   min_confidence=min_confidence, interpolate_low=interpolate_low,
                   channel=channel, chunk_frames=chunk_frames, max_memory=max_memory,
                   features=features)
    with scale_out(gpus, workers, scheduler, device) as (client, gpu_ids):
        prepare_outputs(list(outputs.values()), force)
        t0 = time.perf_counter()
        with progress_bar(n, "measuring", quiet) as bar:
            if client is not None:
                from ..distributed._dask import align as dask_align

                res = dask_align(path, reference, device=device, client=client,
                                 progress=_rate_updater(bar, frame_gb), **options)
            else:
                res = run_align(path, reference, device=dev, gpus=gpu_ids,
                                progress=_rate_updater(bar, frame_gb), **options)
        t_measure = time.perf_counter() - t0
        if not no_aligned:
            box = common_area(res.shifts, shape) if crop else (0, shape[0], 0, shape[1])
            out_shape = (box[1] - box[0], box[3] - box[2])
            shift_args = dict(channel=channel, fill=fill, resample=resample, crop=crop)
            if client is not None:
                from ..distributed._dask import apply_shifts as dask_shifts, iter_blocks

                chunks = iter_blocks(dask_shifts(path, res.shifts, device=device, **shift_args),
                                     client)
            else:
                chunks = apply_shifts(path, res.shifts, chunk_frames=res.settings["chunk_frames"],
                                      device=dev, gpus=gpu_ids, **shift_args)
            with progress_bar(n, "writing aligned.tif", quiet) as bar, \
                    TiffStackWriter(outputs["aligned.tif"], out_shape, "float32",
                                    n_frames=n) as writer:
                for _, chunk in chunks:
                    writer.write(chunk)
                    bar.update(len(chunk))
        ran_on = where(dev, client, gpu_ids)
    summary = res.summary()
    settings = dict(res.settings, resample=resample, crop=crop, fill=fill)
    doc = {"input": str(path), "frame_shape": list(shape), "settings": settings,
           "summary": summary, **backend.environment(dev),
           "seconds_measuring": round(t_measure, 4),
           "frames_per_second": round(n / max(t_measure, 1e-9), 2),
           "frames": res.frame_records()}
    write_text(outputs["shifts.csv"], res.csv_text())
    write_text(outputs["shifts.json"], json.dumps(doc, indent=1) + "\n")
    plot_drift(outputs["drift.png"], res, title=f"{Path(path).name}: reference {reference}")
    if as_json:
        click.echo(json.dumps(doc))
    elif not quiet:
        _print_summary(path, shape, ran_on, res, summary, t_measure, frame_gb, outputs.values())


def _rate_updater(bar, frame_gb):
    """A progress callback that also shows GB/s of input read."""
    t0 = time.perf_counter()
    done = [0]

    def update(k):
        done[0] += k
        bar.update(k)
        bar.set_postfix_str(f"{done[0] * frame_gb / max(time.perf_counter() - t0, 1e-9):.2f} GB/s",
                            refresh=False)
    return update


def _print_summary(path, shape, dev, res, s, seconds, frame_gb, written):
    rate = s["frames"] / max(seconds, 1e-9)
    click.echo(f"xcorr align: {s['frames']} frames of {shape[0]}x{shape[1]} from {path} on {dev} "
               f"({rate:.1f} frames/s, {rate * frame_gb:.3g} GB/s)")
    click.echo(f"  max |shift| {s['max_abs_shift']:.2f} px; reference {res.settings['reference']}, "
               f"subpixel {res.settings['subpixel']}, correlation {res.plan}")
    if res.settings["verify"]:
        n_ok = int(res.agree.sum())
        click.echo(f"  FFT reference: integer peaks agree on {n_ok}/{s['frames']} frames "
                   f"({100 * s['agreement']:.1f}%), RMS difference {s['rms_vs_fft']:.3f} px")
    if s["constant_frames"]:
        click.echo(f"  {s['constant_frames']} constant frame(s): shift undefined (NaN in "
                   "shifts.csv), left unshifted")
    if s["low_confidence_frames"]:
        what = ("shifts interpolated from neighbours" if res.settings["interpolate_low"]
                else "flagged in shifts.csv")
        click.echo(f"  {s['low_confidence_frames']} frame(s) below --min-confidence "
                   f"{res.settings['min_confidence']}: {what}")
    click.echo("  wrote " + ", ".join(str(p) for p in written))


@cli.command(name="filter")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--kernel", "spec", default=None,
              metavar="gaussian:SIGMA|box:N|sobel[:AXIS]|laplace|dog:S1,S2|FILE.npy",
              help="The filter to apply to every frame (one of --kernel, --bank, --mix).")
@click.option("--bank", default=None, metavar="dog:S1,S2,...|gabor:SIGMA,N[,L]|FILE.npy",
              help="A bank of filters over all channels of each frame (im2win or, for 3x3 "
                   "filters, Winograd kernel): writes one channel per filter.")
@click.option("--mix", default=None, metavar="luma|FILE.npy",
              help="Mix the channels of each frame (pointwise kernel): luma, or (F, C) weights.")
@click.option("--mode", type=click.Choice(MODES),
              default="reflect", show_default=True, help="Boundary mode (scipy.ndimage's names).")
@click.option("--cval", type=float, default=0.0, show_default=True,
              help="Value outside the image for --mode constant.")
@click.option("--out", "out_path", type=click.Path(path_type=Path), required=True,
              help="Output TIFF (float32, ImageJ-compatible).")
@scale_out_command
@stack_command
def filter_cmd(path, spec, bank, mix, mode, cval, out_path, gpus, workers, scheduler, channel,
               device, chunk_frames, force, quiet):
    """Filter every frame of PATH and write a float32 stack.

    On a GPU the column/row-reuse kernels filter each chunk of frames in one launch (separable
    filters in two 1-D passes); on the CPU, scipy.ndimage.  The stack is streamed chunk by
    chunk, so it may be larger than the GPU's or the host's memory.  --bank and --mix read
    every channel of each frame and write an ImageJ hyperstack of the result's channels.
    """
    from ..filters._api import parse_kernel_spec
    from ..io._writer import TiffStackWriter, prepare_outputs
    from ..io._reader import open_stack

    given = [o for o, v in (("--kernel", spec), ("--bank", bank), ("--mix", mix)) if v]
    if len(given) != 1:
        raise XcorrError("give exactly one of --kernel, --bank and --mix"
                         + (f" (got {' and '.join(given)})" if given else ""))
    if bank or mix:
        if channel is not None:
            raise XcorrError("--bank and --mix use every channel; drop --channel")
        return _filter_channels(path, bank, mix, out_path, device, chunk_frames, force, quiet,
                                (gpus, workers, scheduler))
    fn = parse_kernel_spec(spec)
    dev = note_device(device, quiet)
    xp = backend.xp_for(dev)

    def filtered(_, chunk):
        # raw dtype to the GPU: the kernels read uint8/uint16/float16 as they are
        return backend.to_numpy(fn(chunk, mode, cval)).astype("float32", copy=False)

    with open_stack(path, channel=channel) as src, \
            scale_out(gpus, workers, scheduler, device) as (client, gpu_ids):
        print_notes(src, quiet)
        prepare_outputs([out_path], force)
        t0 = time.perf_counter()
        if client is not None:
            from ..distributed._dask import filter as dask_filter, iter_blocks

            chunks = iter_blocks(dask_filter(path, spec, mode=mode, cval=cval, channel=channel,
                                             device=device), client)
        elif gpu_ids is not None:
            from ..distributed._multi_gpu import map_chunks

            chunks = map_chunks(lambda: open_stack(path, channel=channel), gpu_ids,
                                chunk_frames, filtered)
        else:
            chunks = ((a, filtered(a, xp.asarray(c))) for a, c in src.chunks(chunk_frames))
        with progress_bar(src.n_frames, "filtering", quiet) as bar, \
                TiffStackWriter(out_path, src.frame_shape, "float32", n_frames=src.n_frames) as w:
            for _, chunk in chunks:
                w.write(chunk)
                bar.update(len(chunk))
        ran_on = where(dev, client, gpu_ids)
        if not quiet:
            click.echo(f"xcorr filter: {src.n_frames} frames of {src.frame_shape[0]}x"
                       f"{src.frame_shape[1]} with {spec} ({mode}) on {ran_on} in "
                       f"{time.perf_counter() - t0:.2f} s; wrote {out_path}")


def _filter_channels(path, bank, mix, out_path, device, chunk_frames, force, quiet, scale):
    """``xcorr filter --bank/--mix``: (n, C, H, W) chunks through conv2d or pointwise, on this
    GPU, several (``--gpus``) or a Dask cluster."""
    import numpy as np

    from ..filters._banks import channel_filter
    from ..io._writer import TiffStackWriter, prepare_outputs
    from ..io._reader import ChannelStack

    dev = note_device(device, quiet)
    xp = backend.xp_for(dev)
    with ChannelStack(path) as src, scale_out(*scale, device) as (client, gpu_ids):
        n_out, fn = channel_filter(bank, mix, src.n_channels)
        print_notes(src, quiet)
        prepare_outputs([out_path], force)
        t0 = time.perf_counter()

        if client is not None:
            from ..distributed._dask import filter_channels, iter_blocks

            chunks = iter_blocks(filter_channels(path, bank=bank, mix=mix, device=device),
                                 client)
        elif gpu_ids is not None:
            from ..distributed._multi_gpu import map_chunks

            chunks = map_chunks(lambda: ChannelStack(path), gpu_ids, chunk_frames,
                                lambda _, f: backend.to_numpy(fn(f.astype("float32"))))
        else:
            chunks = ((a, backend.to_numpy(fn(xp.asarray(src.read(a, min(a + chunk_frames,
                                                                        src.n_frames)))
                                              .astype(xp.float32))))
                      for a in range(0, src.n_frames, chunk_frames))
        with progress_bar(src.n_frames, "filtering", quiet) as bar, \
                TiffStackWriter(out_path, src.frame_shape, "float32",
                                n_frames=src.n_frames * n_out, channels=n_out) as w:
            for _, out in chunks:
                w.write(np.asarray(out).reshape(-1, *src.frame_shape))
                bar.update(len(out))
        ran_on = where(dev, client, gpu_ids)
        if not quiet:
            click.echo(f"xcorr filter: {src.n_frames} frames of {src.n_channels} channel(s) -> "
                       f"{n_out} channel(s) with {bank or mix} on {ran_on} in "
                       f"{time.perf_counter() - t0:.2f} s; wrote {out_path}")


@cli.command()
@user_errors
def info():
    """Show the backend, the GPU, CuPy and the CUDA kernel sources found."""
    from .._cuda.loader import PACKAGE_DIR, kernel_sources

    click.echo(f"xcorr {__version__} (Python {sys.version.split()[0]})")
    if backend.gpu_available():
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        free, total = cupy.cuda.runtime.memGetInfo()
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        click.echo("backend: gpu (CuPy)")
        click.echo(f"GPU: {name}, compute capability {props['major']}.{props['minor']}, "
                   f"{props['multiProcessorCount']} SMs, {total / 2**30:.1f} GiB "
                   f"({free / 2**30:.1f} GiB free)")
        click.echo(f"CuPy: {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}")
    else:
        click.echo("backend: cpu (NumPy/SciPy)")
        click.echo(f"GPU: none usable ({backend.gpu_unavailable_reason()})")
        click.echo("  GPU users: pip install cupy-cuda12x or cupy-cuda13x (your CUDA major version)")
    sources = kernel_sources()
    click.echo(f"kernel sources ({len(sources)}) in {PACKAGE_DIR}:")
    for p in sources:
        click.echo(f"  {p.relative_to(PACKAGE_DIR) if p.is_relative_to(PACKAGE_DIR) else p}")
    if not sources:
        raise XcorrError(f"no CUDA kernel sources found in {PACKAGE_DIR}; reinstall xcorr-app")


@cli.group()
def bench():
    """Time xcorr's kernels against the peers on this GPU (CUDA events, medians)."""


def _planner_notes(quiet=False):
    from ..correlate import _planner as planner

    planner.on_measure = None if quiet else (lambda line: click.echo(line, err=True))


@bench.command(name="xcorr")
@click.option("--explain", is_flag=True,
              help="Re-plan every problem and show what the planner measured and why it chose.")
@click.option("--quick", is_flag=True, help="A handful of small problems (a smoke run).")
@click.option("--only", metavar="TEXT", help="Only problems whose name contains TEXT.")
@click.option("--no-check", is_flag=True, help="Do not compare the outputs with the FFT peer.")
@json_rows_option("(timings, candidates)")
@FORCE
@user_errors
def bench_xcorr_cmd(explain, quick, only, no_check, json_path, force):
    """Cross-correlation: the planner's kernel vs the overlap baseline, CuPy FFT and PyTorch.

    Prints ms per problem, the ratio of the fastest peer to ours, and the share of the FP32
    FMA peak. Exits 1 if any output disagrees with the FFT peer.
    """
    from ..bench import _xcorr as bench_xcorr
    from ..io._writer import prepare_outputs, write_text

    if not backend.gpu_available():
        raise XcorrError(f"xcorr bench needs a GPU: {backend.gpu_unavailable_reason()}")
    problems = bench_xcorr.select(quick, only)
    if not problems:
        raise XcorrError(f"no benchmark problem matches --only {only!r}")
    if json_path is not None:
        prepare_outputs([json_path], force)
    _planner_notes()
    rows = bench_xcorr.run(problems, explain=explain, echo=click.echo, check=not no_check)
    if json_path is not None:
        write_text(json_path, json.dumps(rows, indent=1))
    if any(r["status"] not in ("ok", "unchecked") for r in rows):
        raise click.exceptions.Exit(1)


@bench.command(name="filter")
@click.option("--quick", is_flag=True, help="A small stack, 4 frames of 512x512 (a smoke run).")
@click.option("--frames", type=click.IntRange(min=1), default=None,
              help="Frames in the stack  [default: 32, or 4 with --quick].")
@click.option("--size", metavar="H|HxW", default=None,
              help="Frame size  [default: 2048x2048, or 512x512 with --quick].")
@click.option("--only", metavar="NAME[,NAME]",
              help="Only these rows: 3x3, 5x5, 7x7, 11x11, gaussian31.")
@click.option("--no-check", is_flag=True, help="Do not compare our outputs with cupyx.")
@json_rows_option("(timings, ratios, roofline)")
@FORCE
@user_errors
def bench_filter_cmd(quick, frames, size, only, no_check, json_path, force):
    """Filters: the reuse convolution kernels vs cupyx.scipy.ndimage and PyTorch conv2d.

    A float32 stack (32 frames of 2048x2048) with 3x3, 5x5, 7x7, 11x11 filters and a 31-tap
    separable gaussian, reflect boundary. Prints ms of ours (taps in the parameter bank), of
    the papers' layout (taps in shared memory), of cupyx and of PyTorch (fp32, cuDNN, TF32
    off), the ratio of the fastest peer and of cupyx to ours, and the share of the memory
    roofline (one read and one write of the stack at the copy bandwidth measured in the run).
    Exits 1 if an output of ours disagrees with cupyx.
    """
    from ..bench import _filter as bench_filter

    status = bench_filter.main(quick=quick, frames=frames, size=size, only=only,
                               check=not no_check, json_path=json_path, force=force,
                               echo=click.echo)
    if status:
        raise click.exceptions.Exit(status)


@bench.command(name="conv")
@click.option("--quick", is_flag=True, help="Batches of 4 and 2 (a smoke run).")
@click.option("--only", default=None, metavar="im2win|pointwise|LAYER",
              help="Only these rows (e.g. conv5 or pw3).")
@click.option("--repeat", type=click.IntRange(min=1), default=10, show_default=True,
              help="Timed runs per method (the median is reported).")
@click.option("--no-check", is_flag=True, help="Skip comparing our output with cuDNN's.")
@json_rows_option()
@FORCE
@user_errors
def bench_conv_cmd(quick, only, repeat, no_check, json_path, force):
    """Multi-channel convolution: our kernels (im2win, Winograd for 3x3 at stride 1, whichever
    measures faster) on the 12 layers of the im2win paper (batch 128 and 16) and the pointwise
    kernel on MobileNetV2's 1x1 layers (batch 32), against
    PyTorch/cuDNN (fp32, autotuned, TF32 off) and im2col + CuPy matmul (cuBLAS, TF32 off);
    prints TFLOPS, ratios and peak GPU memory."""
    from ..bench import _conv as bench_conv

    status = bench_conv.main(quick=quick, only=only, check=not no_check, json_path=json_path,
                             force=force, echo=click.echo, repeat=repeat)
    if status:
        raise click.exceptions.Exit(status)


@bench.command(name="align")
@click.option("--quick", is_flag=True, help="32 frames of 512x512 (a smoke run).")
@click.option("--frames", type=click.IntRange(min=2), default=None,
              help="Frames in the stack  [default: 512, or 32 with --quick].")
@click.option("--size", metavar="H|HxW", default=None,
              help="Frame size  [default: 2048x2048, or 512x512 with --quick].")
@click.option("--workdir", type=click.Path(path_type=Path), default=None,
              help="Where to write the stack  [default: the temporary folder].")
@click.option("--keep", is_flag=True, help="Keep the stack file afterwards.")
@click.option("--max-memory", default=None, metavar="SIZE", help="Passed to xcorr align.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Time every row this many times and report the median.")
@json_rows_option()
@click.option("--gpus", default=None, metavar="LIST|all",
              help="Also time the unbounded run shared out over these GPUs, and a read by as "
                   "many threads.")
@FORCE
@user_errors
def bench_align_cmd(quick, frames, size, workdir, keep, max_memory, repeat, json_path, gpus,
                    force):
    """End to end: xcorr align on a uint16 TIFF vs tifffile reading, a per-pair CuPy FFT loop
    and scikit-image.

    Writes a 512-frame 2048x2048 uint16 stack with a known drift to local disk, then times
    reading it with tifffile alone, xcorr align (--max-shift 16, unbounded, and without the FFT
    check), a loop of per-pair CuPy phase correlation (what cuCIM does) and, on 32 frames,
    skimage.registration.phase_cross_correlation; prints frames/s, GB/s, the share of the read
    throughput, the ratio to the per-pair loop and the RMS error against the known drift.
    """
    from ..bench import _align as bench_align

    status = bench_align.main(quick=quick, frames=frames, size=size, workdir=workdir, keep=keep,
                              json_path=json_path, force=force, echo=click.echo,
                              max_memory=max_memory, repeat=repeat, gpus=gpus)
    if status:
        raise click.exceptions.Exit(status)


def main():
    cli(prog_name="xcorr")
