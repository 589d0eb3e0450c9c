"""Issue 48's extreme cases as a user runs them: every one a real ``xcorr`` process under an
address-space limit of 2 GiB and a timeout of 10 s, refused with exit status 2 and one
``error:`` line, nothing written (into the folder it runs in or beside the input) and the input
unchanged.  The limit is set by a few lines of Python before the command runs (not
``Popen(preexec_fn=)``, unsafe where the test process has threads)."""

import hashlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tifffile

from cli_helpers import assert_clean_error, child_env, xcorr
from sample_paths import stack_path

LIMIT_BYTES = 2 << 30
TIMEOUT_S = 10

#: the child's program: the limit, then the command as ``python -m xcorr_app.cli`` runs it
_LIMITED = """
import resource, runpy, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
sys.argv[:] = ["xcorr", *sys.argv[2:]]
runpy.run_module("xcorr_app.cli", run_name="__main__", alter_sys=True)
"""


def limited_xcorr(*args, cwd):
    env = child_env()
    env.pop("XCORR_DEBUG", None)
    # (no GPU: the CUDA driver's own reservations took the 2 GiB, and a thread then could not
    # start, on a GPU machine; the GPUs-where-none cases are skipped there)
    env["CUDA_VISIBLE_DEVICES"] = ""
    # (OpenBLAS's buffers, a set a core, took the rest on a 16-core machine)
    env["OPENBLAS_NUM_THREADS"] = "1"
    return subprocess.run([sys.executable, "-c", _LIMITED, str(LIMIT_BYTES), *map(str, args)],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=TIMEOUT_S)


def fingerprint(folder):
    """Names and contents of a folder's files (the size and modification time of files too
    large to hash quickly: the sparse 9.6 GB stack)."""
    h = hashlib.sha256()
    for f in sorted(folder.rglob("*")):
        h.update(str(f.relative_to(folder)).encode())
        if f.is_file():
            st = f.stat()
            h.update(f.read_bytes() if st.st_size < 1 << 26 else
                     f"{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def gpu_importable():
    try:
        import cupy  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure: no GPU to ask for
        return False
    return True


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The moon sample and a sparse TIFF of 3 pages of 40000x40000 uint16 (9.6 GB that take
    no disk: its pages are never written)."""
    folder = tmp_path_factory.mktemp("inputs")
    shutil.copy(stack_path("moon"), folder / "moon.tif")
    with tifffile.TiffWriter(folder / "huge.tif", bigtiff=True) as tif:
        for _ in range(3):
            tif.write(shape=(40000, 40000), dtype=np.uint16, photometric="minisblack")
    return folder


NO_GPU = pytest.mark.skipif(gpu_importable(), reason="the GPU options run where CuPy is")

CASES = [
    # the option list
    (("align", "moon.tif", "--workers", "-1"), ("--workers",)),
    # more workers than the host runs: refused before a cluster starts (1000 processes hung)
    (("align", "moon.tif", "--workers", "1000"), ("--workers 1000", "this machine has")),
    (("align", "moon.tif", "--workers", "100000", "--device", "cpu"), ("this machine has",)),
    (("filter", "moon.tif", "--kernel", "box:3", "--workers", "1000", "--out", "f.tif"),
     ("--workers 1000", "this machine has")),
    (("align", "moon.tif", "--workers", "2.5"), ("--workers", "whole number")),
    (("align", "moon.tif", "--max-deviation", "2"), ("--max-deviation", "patches")),
    (("align", "moon.tif", "--patch-overlap", "8"), ("--patch-overlap", "patches")),
    (("align", "moon.tif", "--patches", "2x2", "--max-deviation", "-1"), ("--max-deviation",)),
    (("align", "moon.tif", "--patches", "2x2", "--patch-overlap", "-8"), ("--patch-overlap",)),
    (("align", "moon.tif", "--patches", "-1x2"), ("--patches",)),
    (("align", "moon.tif", "--upsample", "10", "--boundary", "linear"),
     ("--upsample", "would be ignored")),
    (("align", "moon.tif", "--no-aligned", "--crop"), ("--crop", "--no-aligned")),
    (("align", "moon.tif", "--no-aligned", "--resample", "fourier"), ("--resample",)),
    (("align", "moon.tif", "--no-aligned", "--fill", "nan"), ("--fill",)),
    (("align", "moon.tif", "--out", ""), ("--out",)),
    (("align", "moon.tif", "--reference", ""), ("--reference",)),
    (("align", "moon.tif", "--reference", "12"), ("reference", "12 frames")),
    (("align", "moon.tif", "--chunk-frames", "2.5"), ("--chunk-frames",)),
    (("align", "moon.tif", "--chunk-frames", "0"), ("--chunk-frames",)),
    (("align", "moon.tif", "--max-memory", "lots"), ("--max-memory", "memory size")),
    (("align", "moon.tif", "--max-memory", "1K"), ("--max-memory",)),
    (("align", "moon.tif", "--channel", "5"), ("channel",)),
    *[(("align", "moon.tif", "--subpixel", "upsample", "--upsample", v), ("--upsample",))
      for v in ("0", "-5", "1.5", "nan")],
    # items 1, 6 and 7
    (("align", "moon.tif", "--fill", "-1e308"), ("--fill", "float32")),
    (("align", "moon.tif", "--subpixel", "upsample", "--upsample", "1000000"), ("--upsample",)),
    (("align", "moon.tif", "--max-shift", "1000000000"), ("--max-shift", "120x160")),
    (("filter", "moon.tif", "--kernel", "gaussian:1e6", "--out", "f.tif"), ("gaussian",)),
    (("filter", "moon.tif", "--kernel", "gaussian:1e9", "--out", "f.tif"), ("gaussian",)),
    (("filter", "moon.tif", "--kernel", "box:100000", "--out", "f.tif"), ("box",)),
    (("filter", "moon.tif", "--kernel", "gaussian:2", "--out", "f.png"), ("--out", ".tif")),
    # (an ImageJ TIFF under an OME-TIFF's name: its readers found no OME-XML)
    (("filter", "moon.tif", "--kernel", "gaussian:2", "--out", "f.ome.tif"), ("not f.ome.tif (the stack holds no OME-XML)",)),
    (("align", "moon.tif", "--prefilter", "gaussian:1e9"), ("--prefilter", "120x160")),
    (("align", "moon.tif", "--prefilter", "dog:1,1e9"), ("--prefilter", "120x160")),
    (("align", "moon.tif", "--features", "gabor:1,1000000000"), ("gabor", "from 1 to 64")),
    (("align", "moon.tif", "--features", "dog:1,1e9"), ("--features", "120x160")),
    (("filter", "moon.tif", "--bank", "dog:1,1e9", "--out", "f.tif"), ("bank", "120x160")),
    (("filter", "moon.tif", "--bank", "gabor:1,1000000000", "--out", "f.tif"), ("from 1 to 64",)),
    # a frame no memory holds: refused from the header, before a frame is read
    (("align", "huge.tif"), ("40000x40000", "GiB")),
    (("align", "huge.tif", "--max-shift", "8", "--max-memory", "1G"), ("40000x40000", "GiB")),
    (("filter", "huge.tif", "--kernel", "gaussian:2"), ("40000x40000", "GiB")),
    # GPUs asked for where there are none (item 8)
    pytest.param(("align", "moon.tif", "--gpus", "0"), ("--gpus", "cupy"), marks=NO_GPU),
    pytest.param(("align", "moon.tif", "--gpus", "all"), ("--gpus", "cupy"), marks=NO_GPU),
    pytest.param(("align", "moon.tif", "--device", "gpu"), ("cupy",), marks=NO_GPU),
]


@pytest.mark.parametrize("args,words", CASES, ids=lambda v: " ".join(v) if v and isinstance(
    v[0], str) and v[0] in ("align", "filter") else "")
def test_an_extreme_case_is_refused_fast_and_small(inputs, tmp_path, args, words):
    before = fingerprint(inputs)
    args = [str(inputs / a) if a in ("moon.tif", "huge.tif") else a for a in args]
    res = limited_xcorr(*args, cwd=tmp_path)  # (subprocess raises TimeoutExpired past 10 s)
    assert res.returncode == 2, res.stderr
    assert_clean_error(res, *words)
    assert not any(tmp_path.iterdir()), sorted(p.name for p in tmp_path.iterdir())
    assert fingerprint(inputs) == before


def test_an_upsample_for_the_circular_refinement_is_not_refused_after_measuring(tmp_path):
    """``--upsample`` with ``--boundary auto`` is kept for a circular refinement that may
    come; on a stack measured linear it goes unused, said in a note (it was refused after
    the first pass)."""
    # (no address-space limit: a whole run's threads reserve more of it on many cores)
    res = xcorr("align", stack_path("moon"), "--upsample", "10", "--no-aligned", "--device",
                "cpu", "--out", tmp_path / "o", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "upsample 10 unused: boundary auto measured the frames linear" in res.stdout
    assert (tmp_path / "o" / "shifts.csv").is_file()


@pytest.mark.parametrize("kwargs,match", [
    (dict(prefilter="gaussian:1e9"), r"prefilter gaussian:1e9 makes a filter of radius"),
    (dict(max_shift=10**9), r"max_shift 1000000000 reaches past frames of 40000x40000"),
    (dict(max_memory="1G", max_shift=8), r"max_memory 1 GiB is too small for frames of 40000x"),
    (dict(max_memory=True), r"max_memory must be a memory size, got True"),
])
def test_the_api_refuses_them_before_a_frame_is_read(inputs, kwargs, match):
    """align(PATH) checks the same limits once the header is read (before the automatic
    choices read whole frames of 3.2 GB)."""
    import time

    from xcorr_app import align
    from xcorr_app.errors import InputError

    t0 = time.perf_counter()
    with pytest.raises(InputError, match=match):
        align(inputs / "huge.tif", device="cpu", **kwargs)
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("kwargs,match", [
    (dict(max_shift=10**9), r"max_shift 1000000000 reaches past frames of 32x32"),
    (dict(subpixel="upsample", upsample=10**6), r"upsample must be a whole number from 1 to 100"),
    (dict(upsample=0), r"upsample must be a whole number from 1 to 100"),
])
def test_estimate_shifts_checks_as_align_does(rng, kwargs, match):
    """estimate_shifts takes no AlignOptions: ``max_shift=10**9`` asked for 14.9 GiB and
    ``upsample=10**6`` for 4.3 GiB (the process was killed)."""
    from xcorr_app.alignment import estimate_shifts
    from xcorr_app.errors import InputError

    frames = rng.random((2, 32, 32)).astype(np.float32)
    with pytest.raises(InputError, match=match):
        estimate_shifts(frames[0], frames[1:], device="cpu", **kwargs)


def test_phase_cross_correlation_refuses_a_region_no_memory_holds(rng):
    """``upsample_factor=10**6`` asked for terabytes (scikit-image's signature takes any
    factor: one the memory holds still runs)."""
    from xcorr_app import phase_cross_correlation
    from xcorr_app.errors import InputError

    img = rng.random((32, 32))
    with pytest.raises(InputError, match=r"upsample_factor 1e\+06 needs an upsampled region of "
                                         r"1500000x1500000"):
        phase_cross_correlation(img, img, upsample_factor=10**6)
    assert phase_cross_correlation(img, img, upsample_factor=20)[0].tolist() == [0.0, 0.0]


def test_conv2d_refuses_a_padding_no_memory_holds(rng):
    from xcorr_app import conv2d
    from xcorr_app.errors import InputError

    x = rng.random((1, 1, 8, 8)).astype(np.float32)
    with pytest.raises(InputError, match=r"padding \(1000000000, 1000000000\) makes a "
                                         r"2000000008x2000000008 padded input"):
        conv2d(x, np.ones((1, 1, 3, 3), np.float32), padding=10**9)
    assert conv2d(x, np.ones((1, 1, 3, 3), np.float32), padding=4).shape == (1, 1, 14, 14)


@pytest.mark.parametrize("call,match", [
    (lambda xd, st: xd.filter(st, "gaussian:1e9"), "kernel gaussian:1e9 makes a filter"),
    (lambda xd, st: xd.filter_channels(st[:, None], bank="dog:1,1e9"),
     "bank dog:1,1e9 makes a filter"),
    (lambda xd, st: xd.apply_shifts(st, np.zeros((2, 2)), fill=1e39), "fill 1e"),
    (lambda xd, st: xd.apply_shifts(st, np.zeros((2, 2)), resample="x"), "unknown resampling"),
])
def test_the_dask_graphs_check_before_their_tasks(rng, call, match):
    """Checked when the graph is made, not in every task (a gaussian of 59.6 GiB each)."""
    pytest.importorskip("dask")
    from xcorr_app import dask as xd
    from xcorr_app.errors import InputError

    with pytest.raises(InputError, match=match):
        call(xd, rng.random((2, 16, 16)).astype(np.float32))


@pytest.mark.parametrize("chunk", [2.5, True, 0])
def test_apply_shifts_takes_whole_chunks(rng, chunk):
    from xcorr_app import apply_shifts
    from xcorr_app.errors import InputError

    stack = rng.random((3, 8, 8)).astype(np.float32)
    with pytest.raises(InputError, match="chunk_frames must be a whole number >= 1"):
        list(apply_shifts(stack, np.zeros((3, 2)), chunk_frames=chunk, device="cpu"))


def test_workers_are_capped_by_the_cores_or_gpus(monkeypatch):
    """One rule for ``--workers`` and :func:`xcorr_app.dask.local_client`: at most a worker
    a CPU core (a GPU with dask-cuda), named in the message."""
    from xcorr_app.errors import InputError
    from xcorr_app.streaming import _gpus, check_workers

    monkeypatch.setattr(_gpus, "cuda_cluster", lambda: False)
    monkeypatch.setattr(_gpus, "machine_cpus", lambda: 3)
    assert [check_workers(n) for n in (1, 3)] == [1, 3]
    with pytest.raises(InputError, match=r"^workers 4: this machine has 3 CPU cores, .*give "
                                         r"at most 3, or .* scheduler=ADDRESS$"):
        check_workers(4)
    monkeypatch.setattr(_gpus, "machine_cpus", lambda: 1)
    with pytest.raises(InputError, match=r"has 1 CPU core, "):
        check_workers(2)
    for bad, match in ((0, ">= 1, got 0"), (-3, ">= 1, got -3"), (2.5, "whole number"),
                       (True, "whole number"), ("2", "whole number")):
        with pytest.raises(InputError, match=match):
            check_workers(bad)


def test_local_client_refuses_before_a_cluster_starts(monkeypatch):
    """Too many workers: refused before any cluster or client is made (not timed: a loaded
    machine's first import of distributed may take seconds)."""
    distributed = pytest.importorskip("distributed")

    from xcorr_app.dask import local_client
    from xcorr_app.errors import InputError

    def started(*args, **kwargs):
        raise AssertionError("a cluster or client was started")

    for name in ("LocalCluster", "Client"):
        monkeypatch.setattr(distributed, name, started)
    with pytest.raises(InputError, match=r"workers 1000000: this machine has"):
        with local_client(workers=10**6):
            pass
