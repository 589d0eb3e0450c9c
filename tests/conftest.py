"""Shared test helpers: the ``gpu`` marker skips cleanly without a usable GPU (unless
``XCORR_REQUIRE_GPU=1``, which the device scripts set: then a missing GPU fails the run); the
``rng`` fixture is seeded per test from a stable hash of the test's id and ``XCORR_TEST_SEED``
(default 0: the same seeds every run).  ``--randomize`` draws a session seed, printed in the
header; ``XCORR_TEST_SEED=<it>`` replays the run.

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
                     help="a fresh session seed for the rng fixture (printed; replay it with "
                          "XCORR_TEST_SEED=<seed>)")


def pytest_configure(config):
    if config.getoption("--randomize") and not os.environ.get("XCORR_TEST_SEED"):
        # set in the environment, so that xdist workers (started later) draw the same
        os.environ["XCORR_TEST_SEED"] = str(int(np.random.SeedSequence().entropy % (2**31)))
    config.test_seed = int(os.environ.get("XCORR_TEST_SEED") or 0)


def pytest_report_header(config):
    return f"xcorr test seed: XCORR_TEST_SEED={config.test_seed}"


def pytest_collection_modifyitems(config, items):
    if backend.gpu_available():
        return
    if os.environ.get("XCORR_REQUIRE_GPU", "") not in ("", "0"):
        pytest.exit(f"XCORR_REQUIRE_GPU is set but no GPU is usable: "
                    f"{backend.gpu_unavailable_reason()}", returncode=3)
    skip = pytest.mark.skip(reason=f"no usable GPU: {backend.gpu_unavailable_reason()}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def seed_for(config, name: str) -> int:
    """The seed of the test (or part of a test) ``name`` in this session: a crc32 of the name,
    mixed with ``XCORR_TEST_SEED`` when that is not 0 (stable across processes, unlike
    ``hash()``)."""
    base = config.test_seed
    return zlib.crc32((name if base == 0 else f"{base}:{name}").encode())


@pytest.fixture(autouse=True)
def _gpu_pool_released(request):
    """After a GPU test, the worker's CuPy pools give their free blocks back: a worker keeps
    what its largest test took otherwise, and 20-28 xdist workers on one GPU of a 4-GPU host
    left the others' CUDA starts out of memory."""
    yield
    if "gpu" in request.keywords and "cupy" in sys.modules:
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()


@pytest.fixture
def rng(request):
    """A generator per test, seeded by :func:`seed_for` from the test's id; the seed is
    printed, so a failure can be repeated."""
    seed = seed_for(request.config, request.node.nodeid)
    print(f"random seed: {seed} (XCORR_TEST_SEED={request.config.test_seed})")
    return np.random.default_rng(seed)


@pytest.fixture(scope="module")
def client():
    """A Dask client on a local cluster of two worker processes, per test module (the Dask
    tests; skipped where distributed is not installed)."""
    distributed = pytest.importorskip("dask.distributed")  # (not tests/distributed)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    with distributed.Client(cluster) as c:
        c.wait_for_workers(2, timeout=120)
        yield c
    cluster.close()


def poisoned(xp, shape, dtype=np.float32):
    """An output buffer full of NaN, so an element the kernel does not write fails the check."""
    return xp.full(shape, np.nan, dtype=dtype)


@pytest.fixture
def poisoned_empty(monkeypatch):
    """``cupy.empty`` gives float buffers full of NaN for the test: a launcher's output that a
    kernel leaves unwritten fails the check."""
    import cupy as cp

    empty = cp.empty

    def allocate(shape, dtype=float, *args, **kw):
        out = empty(shape, dtype, *args, **kw)
        if np.dtype(dtype).kind == "f":
            out.fill(np.nan)
        return out

    monkeypatch.setattr(cp, "empty", allocate)


def rel_error(got, ref) -> float:
    """max |got - ref| / max |ref| (NaN anywhere in ``got`` gives inf)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(got)):
        return float("inf")
    scale = max(float(np.abs(ref).max(initial=0.0)), 1e-30)
    return float(np.abs(got - ref).max(initial=0.0)) / scale


def in_threads(work, n):
    """Run ``work(i)`` for ``i < n`` in ``n`` threads at once; the exceptions they raised."""
    import threading

    errors = []

    def guarded(i):
        try:
            work(i)
        except Exception as exc:  # noqa: BLE001 - returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
