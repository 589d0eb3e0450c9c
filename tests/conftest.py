"""Shared test helpers: the ``gpu`` marker skips cleanly without a usable GPU."""

import numpy as np
import pytest

from xcorr_app import backend


def pytest_collection_modifyitems(config, items):
    if backend.gpu_available():
        return
    skip = pytest.mark.skip(reason=f"no usable GPU: {backend.gpu_unavailable_reason()}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    """A fresh generator per test, seeded from OS entropy (logged on failure)."""
    seed = int(np.random.SeedSequence().entropy % (2**32))
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
