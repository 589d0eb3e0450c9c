"""``xcorr info``: the backend, the GPU, CuPy and the CUDA kernel sources found; ``xcorr info
PATH``: what a stack holds (format, shape, axes, pixel type, chunks, channels)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .._version import __version__
from .. import backend
from ..errors import InputError, XcorrError
from ._input import input_options, input_path
from ._main import OnceCommand

__all__ = ["info"]


#: what ``xcorr info --compile`` builds: pixel types, and search ranges on 1024x1024 frames
COMPILE_DTYPES = ("uint16", "uint8", "float32")
COMPILE_RUNS = ({}, {"max_shift": 16})
COMPILE_SHAPE = (1024, 1024)


@click.command(cls=OnceCommand)
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--compile", "build", is_flag=True,
              help="Build the GPU kernels of the usual align runs now (uint8, uint16 and "
                   "float32 stacks, unbounded and --max-shift 16), so that a first run does "
                   "not compile them; kept in the kernel cache.")
@input_options
def info(path, build, dataset, z, axes):
    """Show the backend, the GPU, CuPy and the CUDA kernel sources found.

    With PATH (a stack in any format xcorr reads, FILE:/DATASET for one inside a file): its
    format, shape, axes, pixel type, chunks, channels and pixel size instead.
    """
    if path is not None:
        if build:
            raise InputError("--compile builds the kernels, PATH describes a stack: give one")
        return _describe(input_path(path, dataset, z, axes))
    if dataset is not None or z is not None or axes is not None:
        raise InputError("--dataset, --z and --axes name what to read inside PATH and how: "
                         "give PATH")
    from .._cuda import (PlanCallBase, describe_shipped, fastlaunch, kernel_sources,
                         kernels_dir)

    click.echo(f"xcorr {__version__} (Python {sys.version.split()[0]})")
    if backend.gpu_available():
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        free, total = cupy.cuda.runtime.memGetInfo()
        click.echo("backend: gpu (CuPy)")
        click.echo(f"GPU: {backend.gpu_name()}, compute capability {props['major']}."
                   f"{props['minor']}, {props['multiProcessorCount']} SMs, "
                   f"{total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB free)")
        click.echo(f"CuPy: {cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}")
    else:
        click.echo("backend: cpu (NumPy/SciPy)")
        click.echo(f"GPU: none usable ({backend.gpu_unavailable_reason()})")
        click.echo("  GPU users: pip install cupy-cuda12x or cupy-cuda13x (your CUDA major version)")
    sources, where = kernel_sources(), kernels_dir()
    click.echo(f"kernel sources ({len(sources)}) in {where}:")
    for p in sources:
        click.echo(f"  {p.relative_to(where).as_posix() if p.is_relative_to(where) else p}")
    if not sources:
        from .._config import KERNEL_DIR, get

        if get(KERNEL_DIR):  # (the folder the variable names, not the package's)
            raise XcorrError(f"{KERNEL_DIR}={get(KERNEL_DIR)} holds no CUDA kernel sources "
                             "(*.cu, *.cuh); point it at a copy of the package's kernels/ "
                             "folder, or unset it")
        raise XcorrError(f"no CUDA kernel sources found in {where}; reinstall xcorr-app")
    shipped = describe_shipped()
    for line in shipped:
        click.echo(line)
    if not shipped:
        click.echo("kernels shipped built: none (compiled at first use; where nvcc is installed, "
                   "python -m xcorr_app._cuda.compile_check --keep builds them)")

    click.echo(f"compiled launch path of plans: {fastlaunch()[1]}; their call: "
               f"{'compiled' if PlanCallBase.__name__ == 'PlanCall' else 'Python'}")
    if build:
        _compile()


def _describe(path):
    """``xcorr info PATH``: what the stack holds, one line each."""
    from ..io import describe

    d = describe(path)
    version = d.get("ngff_version")
    click.echo(f"{d.get('name', path)}: {d['format']}"
               + (f" (OME-NGFF {version})" if version else ""))
    unnamed = "; Q, an axis the file does not name, is read as frames" if "Q" in d["axes"] \
        else ""
    click.echo(f"  shape {' x '.join(map(str, d['shape']))} (axes {d['axes']}{unnamed}), "
               f"{d['dtype']}")
    chunks = d["chunks"]
    click.echo(f"  chunks {' x '.join(map(str, chunks)) if chunks else 'none (contiguous)'}")
    names = ", ".join(n or "?" for n in d["channel_names"])
    click.echo(f"  channels {d['channels']}" + (f" ({names})" if names else ""))
    size = d["pixel_size"]
    click.echo("  pixel size " + (f"{size[0]:g} x {size[1]:g} {size[2]}".rstrip() if size
                                  else "unknown"))
    if "Z" in str(d.get("axes", "")):  # (a Z stack: Fiji's voxel depth)
        z = d.get("z_step")
        click.echo("  z step " + (f"{z:g} {size[2]}".rstrip() if z and size else "unknown"))
    interval = d.get("frame_interval")
    click.echo("  frame interval " + (f"{interval:g} s" if interval else "unknown"))
    click.echo(f"  frames {d['frames']} of {d['frame_shape'][0]}x{d['frame_shape'][1]}"
               + (" (channel 0 of each; --channel picks one)" if d["channels"] > 1 else ""))
    for note in d["notes"]:
        click.echo(f"  note: {note}")


def _compile():
    """``--compile``: every stage of the usual runs built by helper processes, in parallel."""
    import time

    from ..alignment import AlignOptions, PREBUILD_STAGES, prebuild
    from ..errors import InputError

    if not backend.gpu_available():
        raise InputError("xcorr info --compile needs a usable GPU: "
                         f"{backend.gpu_unavailable_reason()}")
    import cupy

    t = time.perf_counter()
    codes = []
    for run in COMPILE_RUNS:
        opts = AlignOptions(**run)
        plan = None
        if opts.max_shift is not None:
            from ..alignment import shared_plan

            shape = COMPILE_SHAPE
            plan = shared_plan(opts, cupy, shape, 16, (cupy.zeros(shape, cupy.float32),))
        for dtype in COMPILE_DTYPES:
            codes += prebuild(opts, COMPILE_SHAPE, dtype, plan, stages=PREBUILD_STAGES,
                              device=cupy.cuda.Device().id, wait=True)
    failed = sum(1 for c in codes if c)
    click.echo(f"compiled: {len(codes) - failed} stage builds in {time.perf_counter() - t:.1f} s"
               + (f", {failed} failed" if failed else "") + " (already built ones skipped)")
    if failed:
        raise XcorrError(f"{failed} kernel builds failed; run xcorr align once to see the error")
