"""Hostile inputs of the 3-D path (``align_volumes``, ``xcorr align --volumes``) and of
z-location (``zlocate``, ``xcorr zlocate``): constant volumes, frames and z-stacks give NaN and
flags or a refusal (never made-up shifts); the arithmetic is scale-free (denormal to 1e30
volumes give the same shifts); named pipes, an unbounded ``--upsample`` and options the mode
ignores are refused up front, with one ``error:`` line and nothing left behind."""

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import tifffile

from cli_helpers import assert_clean_error, child_env, xcorr
from volume_samples import depth_movie, shifted_stack, volume
from xcorr_app.alignment import AlignOptions, VolumeOptions, align_volumes
from xcorr_app.alignment.volume import zlocate
from xcorr_app.errors import InputError
from xcorr_app.registration import MAX_UPSAMPLE

DEVICES = ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)]
TRUE = np.array([[0, 0, 0], [1.25, -0.5, 2.0], [-0.75, 1.5, -1.0], [0.5, 2.25, -1.5]])


@pytest.fixture(scope="module")
def stack():
    """Four (16, 32, 32) volumes of known shifts, largest magnitude 1 (float32)."""
    s = shifted_stack(volume(depth=16, size=32), TRUE, photons=1e4)
    return (s / s.max()).astype(np.float32)


@pytest.fixture(scope="module")
def movie():
    """Frames at known depths of a 12-plane z-stack, largest magnitude 1 (float32)."""
    depths = np.array([3.0, 4.25, 6.5, 8.75])
    frames, zstack = depth_movie(("camera", "coins", "moon"), depths, [(1, -2)] * 4,
                                 photons=1e3, depth=12, size=32)
    top = max(frames.max(), zstack.max())
    return (frames / top).astype(np.float32), (zstack / top).astype(np.float32), depths


# -- constant input: NaN and flags, or a refusal -----------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, reference", [(np.float32, "first"), (np.uint16, "mean"),
                                              (np.float64, 2)])
def test_constant_volumes_get_nan_shifts_and_flags(stack, dtype, reference, device):
    data = (stack * 4000).astype(dtype)
    data[1] = 7  # a constant volume among good ones (the reference is not constant)
    whole = align_volumes((stack * 4000).astype(dtype), reference=reference, device=device)
    res = align_volumes(data, reference=reference, device=device)
    assert np.isnan(res.shifts[1]).all() and np.isnan(res.peak[1])
    assert res.constant_volumes.tolist() == [1]
    assert res.confidence[1] == 0 and not res.verified[1] and not res.at_bound[1]
    good = [0, 2, 3]
    assert np.isfinite(res.shifts[good]).all() and res.verified[good].all()
    if reference != "mean":  # (the others' shifts as without the constant volume)
        np.testing.assert_allclose(res.shifts[good], whole.shifts[good], atol=1e-6)
    assert any(n.startswith("1 constant volume(s): shift undefined (NaN)") for n in res.notes)
    row = res.rows()[1]
    assert np.isnan(row["dz"]) and row["verified"] is False
    assert res.to_csv().splitlines()[2].startswith("1,nan,nan,nan,nan,0.000000,False,False")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("data, reference", [
    (np.full((3, 8, 16, 16), 5.0, np.float32), "first"),      # every volume: the issue's -0.7
    (np.zeros((2, 4, 8, 8), np.uint8), "mean"),
    (np.full((3, 8, 16, 16), 1e-40, np.float32), "first"),    # a denormal constant
    ("first_constant", "first"),
    ("first_constant", 0),
])
def test_a_constant_reference_is_refused(stack, data, reference, device):
    if isinstance(data, str):
        data = stack.copy()
        data[0] = 3.0
    # (a GPU refuses the denormal one first: check_gpu_float32)
    gpu_refuses = device == "gpu" and data.dtype == np.float32 and np.abs(data).max() < 1e-30
    with pytest.raises(InputError, match="float32 pixels reach at most" if gpu_refuses else
                       r"the reference volume \(.*\) is constant"):
        align_volumes(data, reference=reference, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_a_constant_z_stack_is_refused(movie, device):
    frames, zstack, _ = movie
    for planes in (np.full_like(zstack, 3.0), np.zeros((4, 32, 32), np.uint16),
                   np.arange(12, dtype=np.float32)[:, None, None] + np.zeros((12, 32, 32))):
        with pytest.raises(InputError, match="every plane of the z-stack is constant"):
            zlocate(frames, planes, device=device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("subplane", ["projection", "parabola"])
def test_constant_frames_get_nan_depth(movie, subplane, device):
    frames, zstack, depths = movie
    data = frames.copy()
    data[1], data[3] = 2.0, 0.0
    whole = zlocate(frames, zstack, max_shift=4, subplane=subplane, device=device)
    res = zlocate(data, zstack, max_shift=4, subplane=subplane, device=device)
    for i in (1, 3):
        assert np.isnan(res.depth[i]) and np.isnan(res.shifts[i]).all()
        assert np.isnan(res.score[i]) and np.isnan(res.profile[i]).all()
        assert res.plane[i] == -1 and res.confidence[i] == 0 and not res.at_edge[i]
    np.testing.assert_allclose(res.depth[[0, 2]], whole.depth[[0, 2]], atol=1e-9)
    assert np.abs(res.depth[[0, 2]] - depths[[0, 2]]).max() < 0.2
    assert any(n.startswith("2 constant frame(s)") for n in res.notes)
    assert res.to_csv().splitlines()[2] == "1,nan,nan,nan,nan,nan,0.000000,False"


# -- scale: the same shifts from denormal to 1e30 ----------------------------------------------

SCALES = [(np.float32, s) for s in (1e-40, 1e-30, 1.0, 1e20, 1e30)] + [
    (np.float64, 1e-300), (np.float64, 1e300)]


def _gpu_refuses(device, *arrays) -> bool:
    """Whether a GPU run refuses these float32 volumes, frames or planes (the first's largest
    magnitude outside GPU_FLOAT32_RANGE: CuPy's kernels flush denormals to zero), which the
    CPU measures."""
    from xcorr_app.alignment.rigid import GPU_FLOAT32_RANGE

    lo, hi = GPU_FLOAT32_RANGE
    return device == "gpu" and any(
        a.dtype == np.float32 and not lo <= float(np.abs(a[0]).max()) <= hi for a in arrays)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reference", ["first", "mean"])
def test_volume_shifts_do_not_depend_on_scale(stack, reference, device):
    base = align_volumes(stack, reference=reference, device=device)
    np.testing.assert_allclose(base.shifts, base.shifts[:1] - TRUE, atol=0.05)
    for dtype, scale in SCALES:
        data = (stack.astype(np.float64) * scale).astype(dtype)
        if scale == 1e-40:  # (what the test claims: float32 denormals)
            assert np.abs(data).max() < np.finfo(np.float32).tiny
        if _gpu_refuses(device, data):
            with pytest.raises(InputError, match="float32 pixels reach at most"):
                align_volumes(data, reference=reference, device=device)
            continue
        res = align_volumes(data, reference=reference, device=device)
        np.testing.assert_allclose(res.shifts, base.shifts, atol=0.05, err_msg=str(scale))
        np.testing.assert_allclose(res.peak, base.peak, atol=1e-3, err_msg=str(scale))
        assert res.verified.all(), scale


@pytest.mark.parametrize("device", DEVICES)
def test_depths_do_not_depend_on_scale(movie, device):
    frames, zstack, depths = movie
    base = zlocate(frames, zstack, max_shift=4, device=device)
    assert np.abs(base.depth - depths).max() < 0.2
    for dtype, scale in SCALES:
        scaled = [(a.astype(np.float64) * scale).astype(dtype) for a in (frames, zstack)]
        if _gpu_refuses(device, *scaled):
            with pytest.raises(InputError, match="float32 pixels reach at most"):
                zlocate(*scaled, max_shift=4, device=device)
            continue
        res = zlocate(*scaled, max_shift=4, device=device)
        np.testing.assert_allclose(res.depth, base.depth, atol=0.05, err_msg=str(scale))
        np.testing.assert_allclose(res.shifts, base.shifts, atol=0.05, err_msg=str(scale))
        np.testing.assert_allclose(res.score, base.score, atol=1e-3, err_msg=str(scale))


def test_frames_and_planes_of_different_scales(movie):
    """Each frame is scaled by its own power of two, the z-stack by one for all its planes."""
    frames, zstack, _ = movie
    base = zlocate(frames, zstack, max_shift=4, device="cpu")
    scaled = frames.astype(np.float64) * np.array([1e-30, 1.0, 1e25, 3e-3])[:, None, None]
    res = zlocate(scaled.astype(np.float32), zstack * np.float32(1e20), max_shift=4,
                  device="cpu")
    np.testing.assert_allclose(res.depth, base.depth, atol=0.05)


# -- --upsample: the one limit of 2-D align, volumes and zlocate -------------------------------

@pytest.mark.parametrize("value", [0.5, 101, 1000, 1e6, float("nan"), float("inf"), True, "x"])
def test_upsample_is_range_checked_up_front(value):
    assert MAX_UPSAMPLE == 100
    t0 = time.perf_counter()
    with pytest.raises(InputError, match=f"from 1 to {MAX_UPSAMPLE}"):
        VolumeOptions(upsample=value)
    with pytest.raises(InputError, match=f"from 1 to {MAX_UPSAMPLE}"):
        zlocate(np.ones((2, 8, 8)), np.ones((3, 8, 8)), upsample=value, device="cpu")
    assert time.perf_counter() - t0 < 5


def test_upsample_limit_is_that_of_2d_align():
    assert VolumeOptions(upsample=MAX_UPSAMPLE).upsample == MAX_UPSAMPLE
    assert AlignOptions(upsample=MAX_UPSAMPLE, subpixel="upsample").upsample == MAX_UPSAMPLE
    with pytest.raises(InputError, match=f"from 1 to {MAX_UPSAMPLE}"):
        AlignOptions(upsample=MAX_UPSAMPLE + 1, subpixel="upsample")


# -- the command line: one error line, nothing written, nothing left behind --------------------

def _outputs(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else None


def test_cli_constant_volume_writes_nan_and_null(tmp_path, stack):
    data = (stack * 1e20).astype(np.float32)  # (1e20: was a JSON crash on NaN)
    data[2] = 1e20
    np.save(tmp_path / "v.npy", data)
    out = tmp_path / "out"
    res = xcorr("align", tmp_path / "v.npy", "--volumes", "--out", out, "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert "note: 1 constant volume(s): shift undefined (NaN)" in res.stderr
    assert "Warning" not in res.stderr
    rows = (out / "shifts.csv").read_text().splitlines()
    assert rows[3].startswith("2,nan,nan,nan,nan,0.000000,False,False")
    got = np.array([[float(v) for v in r.split(",")[1:4]] for r in rows[1:]])
    np.testing.assert_allclose(got[[0, 1, 3]], -TRUE[[0, 1, 3]], atol=0.05)

    def no_bare_constants(name):
        raise AssertionError(f"bare {name} in shifts.json")
    doc = json.loads((out / "shifts.json").read_text(), parse_constant=no_bare_constants)
    assert doc["volumes"][2]["dz"] is None and doc["volumes"][2]["verified"] is False
    aligned = tifffile.imread(out / "aligned.tif")
    np.testing.assert_array_equal(aligned[2], data[2])  # (left unshifted)
    assert (out / "drift.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_zlocate_constant_frame(tmp_path, movie):
    frames, zstack, depths = movie
    data = frames.copy()
    data[2] = 0.5
    np.save(tmp_path / "m.npy", data)
    np.save(tmp_path / "z.npy", zstack)
    out = tmp_path / "out"
    res = xcorr("zlocate", tmp_path / "m.npy", "--zstack", tmp_path / "z.npy", "--out", out,
                "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert "note: 1 constant frame(s)" in res.stderr and "Warning" not in res.stderr
    rows = (out / "zlocate.csv").read_text().splitlines()
    assert rows[3] == "2,nan,nan,nan,nan,nan,0.000000,False"
    assert abs(float(rows[1].split(",")[1]) - depths[0]) < 0.2
    assert (out / "zlocate.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("args", [
    ("align", "{c}", "--volumes"),
    ("zlocate", "{m}", "--zstack", "{c3}"),
])
def test_cli_all_constant_is_refused(tmp_path, args):
    np.save(tmp_path / "c.npy", np.full((3, 4, 16, 16), 9, np.int16))
    np.save(tmp_path / "c3.npy", np.full((5, 16, 16), 2.5, np.float32))
    np.save(tmp_path / "m.npy", np.random.default_rng(0).random((2, 16, 16)))
    out = tmp_path / "out"
    res = xcorr(*[a.format(c=tmp_path / "c.npy", c3=tmp_path / "c3.npy", m=tmp_path / "m.npy")
                  for a in args], "--out", out, "--device", "cpu")
    assert_clean_error(res, "constant")
    assert res.returncode == 2 and _outputs(out) is None


def _unblock(fifo):
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
@pytest.mark.parametrize("args", [
    ("align", "{p}", "--volumes"),
    ("zlocate", "{p}", "--zstack", "{z}"),
    ("zlocate", "{m}", "--zstack", "{p}"),
])
@pytest.mark.parametrize("name", ["pipe.npy", "pipe.tif", "pipe.zarr"])
def test_cli_named_pipe_is_refused_not_read(tmp_path, args, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    np.save(tmp_path / "z.npy", np.random.default_rng(1).random((4, 16, 16)))
    np.save(tmp_path / "m.npy", np.random.default_rng(2).random((2, 16, 16)))
    out = tmp_path / "out"
    env = child_env()
    env.pop("XCORR_DEBUG", None)
    cmd = [a.format(p=fifo, z=tmp_path / "z.npy", m=tmp_path / "m.npy") for a in args]
    t0 = time.perf_counter()
    try:
        res = subprocess.run([sys.executable, "-m", "xcorr_app.cli", *cmd, "--out", str(out),
                              "--device", "cpu"], capture_output=True, text=True, env=env,
                             timeout=30)
    finally:  # (a reader blocked on the pipe: its write end opened frees it)
        threading.Thread(target=lambda: _unblock(fifo), daemon=True).start()
    assert time.perf_counter() - t0 < 10
    assert_clean_error(res, name, "not a regular file")
    assert res.returncode == 2 and _outputs(out) is None  # (no .xcorr.lock either)


@pytest.mark.parametrize("args", [
    ("align", "{v}", "--volumes", "--upsample", "1000"),
    ("align", "{v}", "--volumes", "--upsample", "0"),
    ("zlocate", "{m}", "--zstack", "{z}", "--upsample", "1e6"),
    ("zlocate", "{m}", "--zstack", "{z}", "--upsample", "nan"),
])
def test_cli_upsample_out_of_range_is_refused_up_front(tmp_path, stack, args):
    np.save(tmp_path / "v.npy", stack[:2])
    np.save(tmp_path / "z.npy", stack[0, :4])
    np.save(tmp_path / "m.npy", stack[1, :2])
    out = tmp_path / "out"
    t0 = time.perf_counter()
    res = xcorr(*[a.format(v=tmp_path / "v.npy", z=tmp_path / "z.npy", m=tmp_path / "m.npy")
                  for a in args], "--out", out, "--device", "cpu")
    assert time.perf_counter() - t0 < 10
    assert_clean_error(res, "--upsample", "from 1 to 100")
    assert res.returncode == 2 and _outputs(out) is None


@pytest.mark.parametrize("given, named", [
    (["--normalization", "phase"], "--normalization does not apply to --volumes"),
    (["--min-confidence", "0.5"], "--min-confidence does not apply"),
    (["--min-confidence", "0.5", "--interpolate-low"], "--interpolate-low, --min-confidence do "),
    (["--resample", "fourier"], "--resample does not apply"),
    (["--subpixel", "parabolic"], "--subpixel does not apply"),
    (["--prefilter", "none"], "--prefilter does not apply"),
    (["--window", "hann"], "--window does not apply"),
    (["--no-verify"], "--no-verify does not apply"),
    (["--z", "1"], "--z does not apply"),
    # given at its default value: still given, still refused
    (["--normalization", "zncc", "--subpixel", "gaussian", "--window", "none"],
     "--normalization, --subpixel, --window do not apply to --volumes"),
])
def test_cli_options_volumes_ignore_are_refused(tmp_path, stack, given, named):
    np.save(tmp_path / "v.npy", stack[:2])
    out = tmp_path / "out"
    res = xcorr("align", tmp_path / "v.npy", "--volumes", *given, "--out", out, "--device",
                "cpu")
    assert_clean_error(res, named)
    assert res.returncode == 2 and _outputs(out) is None


def test_cli_memory_advice_names_only_the_commands_options(tmp_path, stack, monkeypatch):
    """An estimate that falls short (MemoryError) is one line whose advice names only options
    the command has (the generic advice named --chunk-frames, which neither has)."""
    from click.testing import CliRunner

    import xcorr_app.alignment as alignment
    import xcorr_app.alignment.volume as volume
    from xcorr_app.cli._align import align
    from xcorr_app.cli._main import cli
    from xcorr_app.cli._zlocate import zlocate_cmd

    def short(*args, **kwargs):
        raise MemoryError("cannot allocate 302 GiB")

    monkeypatch.setattr(alignment, "align_volumes", short)
    monkeypatch.setattr(volume, "zlocate", short)
    np.save(tmp_path / "v.npy", stack[:2])
    np.save(tmp_path / "m.npy", stack[1, :2])
    np.save(tmp_path / "z.npy", stack[0, :4])
    for args, command in ((["align", "v.npy", "--volumes", "--out", "o1"], align),
                          (["zlocate", "m.npy", "--zstack", "z.npy", "--out", "o2"],
                           zlocate_cmd)):
        with monkeypatch.context() as m:
            m.chdir(tmp_path)
            res = CliRunner().invoke(cli, args + ["--device", "cpu", "--quiet"])
        assert res.exit_code == 2, res.output
        line = res.output.strip()
        assert line.startswith("error: out of memory (cannot allocate 302 GiB)"), line
        flags = {w.strip(",.:;()") for w in line.split() if w.startswith("--")}
        have = {o for p in command.params for o in p.opts}
        assert flags and flags <= have, (flags - have)
        assert not (tmp_path / args[-1]).exists()
