"""What a result was computed with: the device and the library versions, the one place they
are collected (``shifts.json``'s ``device`` and ``versions``, the benches' headers)."""

from __future__ import annotations

from .backend import gpu_name

__all__ = ["environment", "versions"]


def versions(libraries=("numpy", "scipy", "tifffile", "cupy")) -> dict:
    """``{name: version}`` of xcorr, Python and each library of ``libraries`` that imports
    (a missing one is ``"missing"``): the one place versions are collected.

    Examples
    --------
    >>> sorted(versions(("numpy",)))
    ['numpy', 'python', 'xcorr']
    """
    import sys

    from ._version import __version__

    found = {"xcorr": __version__, "python": sys.version.split()[0]}
    for name in libraries:
        try:
            module = sys.modules.get(name)
            # a library the run did not import is read from its metadata, not imported
            # (importing SciPy cost a GPU run 0.9 s when it wrote shifts.json)
            found[name] = module.__version__ if module is not None else _installed(name)
        except Exception:  # noqa: BLE001 - a missing optional library
            found[name] = "missing"
    return found


def _installed(name: str) -> str:
    """The installed version of the import package ``name`` (CuPy's distribution is named
    for its CUDA version, e.g. ``cupy-cuda12x``)."""
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        for dist in metadata.packages_distributions().get(name, []):
            return metadata.version(dist)
        raise


def environment(device: str) -> dict:
    """What a result was computed with: the device (GPU name) and the library versions.

    Examples
    --------
    >>> sorted(environment("cpu"))
    ['device', 'versions']
    """
    libs = ("numpy", "scipy", "tifffile") + (("cupy",) if device == "gpu" else ())
    found = {k: v for k, v in versions(libs).items() if v != "missing"}
    where = f"gpu: {gpu_name()}" if device == "gpu" else "cpu"
    return {"device": where, "versions": found}
