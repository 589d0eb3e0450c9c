"""Shared test helpers: the ``gpu`` marker skips cleanly without a usable GPU; the ``rng``
fixture is seeded per test (deterministic by default, ``--randomize`` for fresh seeds).

The tests mirror the package: ``tests/<subpackage>/test_<module>.py``.  This folder is on
``sys.path`` so that every test can import the helpers beside this file (``synthetic``,
``sample_paths``, ``conftest``).
"""

import os
import sys
import zlib

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from xcorr_app import backend  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--randomize", action="store_true",
                     help="seed the rng fixture from OS entropy instead of the test's name")


def pytest_collection_modifyitems(config, items):
    if backend.gpu_available():
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {backend.gpu_unavailable_reason()}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    """A generator per test: seeded from the test's id (the same every run), or from OS entropy
    with ``--randomize``; the seed is printed, so a failure can be repeated."""
    if request.config.getoption("--randomize"):
        seed = int(np.random.SeedSequence().entropy % (2**32))
    else:
        seed = zlib.crc32(request.node.nodeid.encode())
    print(f"random seed: {seed}")
    return np.random.default_rng(seed)


def poisoned(xp, shape, dtype=np.float32):
    """An output buffer full of NaN, so an element the kernel does not write fails the check."""
    return xp.full(shape, np.nan, dtype=dtype)


def rel_error(got, ref) -> float:
    """max |got - ref| / max |ref| (NaN anywhere in ``got`` gives inf)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(got)):
        return float("inf")
    scale = max(float(np.abs(ref).max(initial=0.0)), 1e-30)
    return float(np.abs(got - ref).max(initial=0.0)) / scale
