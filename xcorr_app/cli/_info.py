"""``xcorr info``: the backend, the GPU, CuPy and the CUDA kernel sources found."""

from __future__ import annotations

import sys

import click

from .._version import __version__
from .. import backend
from ..errors import XcorrError

__all__ = ["info"]


@click.command()
def info():
    """Show the backend, the GPU, CuPy and the CUDA kernel sources found."""
    from .._cuda.loader import PACKAGE_DIR, kernel_sources

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
    sources = kernel_sources()
    click.echo(f"kernel sources ({len(sources)}) in {PACKAGE_DIR}:")
    for p in sources:
        click.echo(f"  {p.relative_to(PACKAGE_DIR) if p.is_relative_to(PACKAGE_DIR) else p}")
    if not sources:
        raise XcorrError(f"no CUDA kernel sources found in {PACKAGE_DIR}; reinstall xcorr-app")
