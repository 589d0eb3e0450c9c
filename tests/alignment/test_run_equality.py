"""The equality matrix of the one pipeline (:func:`xcorr_app.alignment.run_alignment`): the
same stacks and options give the same shifts, flags and notes through the Python API, the
command line, Dask (two local worker processes, and Dask's threads) and ``gpus`` (on a GPU).

Bitwise where every path does the same arithmetic; within 1e-6 px where template sums or a
mean reference are added up range by range (float64 sums in another grouping: the ``summed``
cases); the GPU paths against one GPU within 1e-4 px (another GPU's float32 reductions).
"""

import json

import numpy as np
import pytest
import tifffile

from cli_helpers import xcorr
from synthetic import drift_stack
from xcorr_app import align
from xcorr_app.bench._align_data import nonrigid_stack

da = pytest.importorskip("dask.array")
xdask = pytest.importorskip("xcorr_app.distributed._dask")

#: frames per Dask task: not a multiple of the chunk, so ranges cut chunks differently
TASK_FRAMES = 5
CHUNK = 4


def _periodic(rng, n=10, size=72, photons=800):
    """Circular shifts of a real image (Fourier-shifted), Poisson noise: wrap-around frames."""
    from skimage import data

    img = data.camera()[140:140 + size, 220:220 + size].astype(np.float64)
    ky, kx = np.fft.fftfreq(size)[:, None], np.fft.fftfreq(size)[None]
    moves = rng.uniform(-5, 5, (n, 2))
    moves[0] = 0
    spec = np.fft.fft2(img)
    frames = np.stack([np.fft.ifft2(spec * np.exp(-2j * np.pi * (ky * m[0] + kx * m[1]))).real
                       for m in moves])
    return rng.poisson(np.clip(frames / frames.max() * photons, 0, None)).astype(np.uint16)


def _bleaching(rng, n=10):
    stack, _ = drift_stack(rng, n=n, shape=(72, 80), max_shift=5, peak_counts=400)
    fade = np.linspace(1.0, 0.4, n)[:, None, None]
    return (stack * fade + 300).astype(np.uint16)  # bleaching over a static background


@pytest.fixture(scope="module")
def stacks(tmp_path_factory):
    """Each stack as a TIFF (paths read by every path) and as an array."""
    rng = np.random.default_rng(47)
    made = {
        "linear": drift_stack(rng, n=10, shape=(72, 80), max_shift=5, peak_counts=300)[0],
        "periodic": _periodic(rng),
        "bleaching": _bleaching(rng),
        "low_light": drift_stack(rng, n=10, shape=(72, 80), max_shift=4, peak_counts=12)[0],
        "piecewise": nonrigid_stack(rng, 8, (96, 96), 5.0, 2.0, 400.0, "coins")[0],
    }
    folder = tmp_path_factory.mktemp("equality")
    out = {}
    for name, stack in made.items():
        path = folder / f"{name}.tif"
        tifffile.imwrite(path, stack)
        out[name] = (path, stack)
    return out


#: (stack, options, summed): every option that changes which steps run
CASES = [
    ("linear", {}, False),
    ("linear", {"max_shift": 6}, False),
    ("linear", {"boundary": "circular"}, False),
    ("linear", {"verify": False, "subpixel": "parabolic"}, False),
    ("linear", {"subpixel": "upsample", "upsample": 10}, False),
    ("linear", {"reference": 3}, False),
    ("linear", {"reference": "previous", "max_shift": 8}, False),
    ("linear", {"reference": "mean:6"}, True),
    ("linear", {"reference": "refined"}, True),
    ("linear", {"min_confidence": 1.5, "interpolate_low": True}, False),
    ("periodic", {}, False),
    ("periodic", {"boundary": "linear"}, False),
    ("periodic", {"normalization": "phase", "subpixel": "upsample"}, False),
    ("bleaching", {}, False),
    ("bleaching", {"prefilter": "none"}, False),
    ("low_light", {}, True),
    ("low_light", {"lucas_kanade": "on", "reference": "refined:2"}, True),
    ("low_light", {"lucas_kanade": "off"}, False),
    ("piecewise", {"patches": "2x2", "max_shift": 8}, False),
    ("piecewise", {"patches": "2x2", "patch_template_passes": 1, "reference": "refined"},
     True),
]
IDS = [f"{s}-{'-'.join(f'{k}={v}' for k, v in o.items()) or 'defaults'}" for s, o, _ in CASES]


def _flags(res):
    return {"low": res.low_confidence.tolist(), "border": res.border.tolist(),
            "agree": res.agree.tolist()}


def assert_same(got, want, summed, what):
    """Shifts bitwise (within 1e-6 px where sums are grouped otherwise), the same flags and
    notes, the same settings of what ran."""
    if summed:
        np.testing.assert_allclose(got.shifts, want.shifts, atol=1e-6, err_msg=what)
    else:
        np.testing.assert_array_equal(got.shifts, want.shifts, err_msg=what)
    assert _flags(got) == _flags(want), what
    assert got.notes == want.notes, what
    for key in ("boundary", "subpixel", "prefilter", "lucas_kanade", "reference"):
        assert got.settings[key] == want.settings[key], (what, key)
    np.testing.assert_allclose(got.quality.after, want.quality.after, atol=1e-6, err_msg=what)
    assert (got.quality.flagged == want.quality.flagged).all(), what
    if want.quality.patch_after is not None:  # (piecewise: per patch region too)
        np.testing.assert_allclose(got.quality.patch_after, want.quality.patch_after,
                                   atol=1e-6, err_msg=what)
        assert (got.quality.patch_flagged == want.quality.patch_flagged).all(), what
    if want.motion_field is not None:
        np.testing.assert_allclose(got.motion_field, want.motion_field,
                                   atol=1e-6 if summed else 0, err_msg=what)


@pytest.mark.parametrize("name,options,summed", CASES, ids=IDS)
def test_api_and_dask_give_one_answer(stacks, client, name, options, summed):
    """The API on a path and on an array, Dask tasks on two worker processes (a path: every
    task reads its own frames) and on Dask's threads (a dask array's blocks)."""
    path, stack = stacks[name]
    kw = dict(device="cpu", chunk_frames=CHUNK, **options)
    want = align(path, **kw)
    assert_same(align(stack, **kw), want, False, "API array")
    assert_same(xdask.align(path, client=client, task_frames=TASK_FRAMES, **kw), want, summed,
                "Dask workers")
    blocks = da.from_array(stack, chunks=(TASK_FRAMES, -1, -1))
    assert_same(xdask.align(blocks, scheduler="threads", **kw), want, summed, "Dask threads")


#: the command line's flags for the cases run through real processes
CLI_CASES = [0, 8, 10, 14, 16, 18]


@pytest.mark.parametrize("k", CLI_CASES, ids=[IDS[k] for k in CLI_CASES])
def test_cli_gives_the_api_answer(stacks, tmp_path, k):
    """``xcorr align`` (a process) writes the API's shifts: shifts.csv from the same numbers,
    shifts.json's flags and notes."""
    name, options, _ = CASES[k]
    path, _ = stacks[name]
    kw = dict(device="cpu", chunk_frames=CHUNK, **options)
    want = align(path, **kw)
    flags = []
    for key, v in kw.items():
        flag = "--" + key.replace("_", "-")
        if key == "verify":
            flags += [] if v else ["--no-verify"]
        elif v is True:
            flags.append(flag)
        else:
            flags += [flag, str(v)]
    res = xcorr("align", path, "--out", tmp_path / "o", "--no-aligned", "-q", *flags)
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "o" / "shifts.json").read_text())
    got = np.array([[f["dy"], f["dx"]] for f in doc["frames"]], dtype=float)
    np.testing.assert_array_equal(got, np.where(np.isnan(want.shifts), np.nan, want.shifts))
    assert [f["low_confidence"] for f in doc["frames"]] == want.low_confidence.tolist()
    assert doc["summary"]["notes"] == want.summary()["notes"]


def test_cli_workers_on_a_periodic_stack_match_one_process(stacks, tmp_path):
    """The case that differed: a wrap-around stack through ``--workers 2`` and alone."""
    path, _ = stacks["periodic"]
    one, two = tmp_path / "one", tmp_path / "two"
    for out, extra in ((one, ()), (two, ("--workers", "2"))):
        res = xcorr("align", path, "--device", "cpu", "--no-aligned", "-q", "--out", out,
                    *extra)
        assert res.returncode == 0, res.stderr
    assert (one / "shifts.csv").read_text() == (two / "shifts.csv").read_text()
    doc = json.loads((two / "shifts.json").read_text())
    assert doc["settings"]["boundary"] == "circular" and doc["settings"]["executor"] == "dask"


# ------------------------------------------------------------------------------------ GPU

@pytest.mark.gpu
@pytest.mark.parametrize("name,options,summed", CASES, ids=IDS)
def test_gpu_paths_give_one_answer(stacks, name, options, summed):
    """On the GPU: one GPU through ``gpus`` (its ranges on worker threads), every GPU of the
    machine, and Dask with the GPU, against the API on one GPU (bitwise where the arithmetic is the same; 1e-4 px where
    ranges group the sums otherwise), and the CPU within 1e-3 px."""
    path, stack = stacks[name]
    kw = dict(chunk_frames=CHUNK, **options)
    want = align(path, device="gpu", **kw)
    assert want.settings["device"] == "gpu"
    import cupy

    # GPU 0 through the executor of several, and every GPU of a machine that has more
    for gpus in [[0]] + (["all"] if cupy.cuda.runtime.getDeviceCount() > 1 else []):
        got = align(path, gpus=gpus, **kw)
        assert got.settings["executor"] == "gpus"
        np.testing.assert_allclose(got.shifts, want.shifts, atol=1e-4, err_msg=f"gpus={gpus}")
        assert got.notes == want.notes and _flags(got)["low"] == _flags(want)["low"]
        # (the mean images' sums of several GPUs' ranges added on the first: peer copies)
        q, w = got.quality, want.quality
        np.testing.assert_allclose([q.sharpness_before, q.sharpness_after],
                                   [w.sharpness_before, w.sharpness_after], rtol=1e-5)
    dask = xdask.align(path, device="gpu", task_frames=TASK_FRAMES, scheduler="threads", **kw)
    np.testing.assert_allclose(dask.shifts, want.shifts, atol=1e-4, err_msg="Dask on the GPU")
    assert dask.notes == want.notes
    cpu = align(path, device="cpu", **kw)
    np.testing.assert_allclose(cpu.shifts, want.shifts, atol=1e-3, err_msg="CPU")


@pytest.mark.gpu
def test_a_gpus_run_imports_no_cupyx(tmp_path):
    """A one-shot ``gpus`` run (its report's mean images added and measured on the first GPU)
    loads no cupyx: its import (linalg, sparse, SciPy's) was most of a second of it.  (``import
    cupy`` puts a lazy ``cupyx`` in sys.modules: what counts is whether it was loaded.)"""
    from fresh_process import fresh_output

    stack, _ = drift_stack(np.random.default_rng(3), n=24, shape=(64, 80))
    path = tmp_path / "s.tif"
    tifffile.imwrite(path, stack.astype(np.float32))
    # (several GPUs where the machine has them: their ranges' sums are added on the first)
    code = ("import sys, cupy; from xcorr_app import align; "
            "n = cupy.cuda.runtime.getDeviceCount(); "
            "r = align(sys.argv[1], gpus=list(range(n))); "
            "assert r.settings['executor'] == 'gpus' and r.quality is not None; "
            "print(sorted(m for m in ('cupyx.linalg',) if m in sys.modules))")
    assert fresh_output(code, path).strip().splitlines()[-1] == "[]"
