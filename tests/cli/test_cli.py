"""The command-line app through a real subprocess: outputs, summaries and bad inputs."""

import csv
import json
import os
import subprocess

import numpy as np
import pytest
import tifffile

from sample_paths import SAMPLES, folder_path, stack_path, truth
from cli_helpers import assert_clean_error, child_env, digest, from_a_terminal, xcorr  # noqa: E402,F401


@pytest.mark.parametrize("name", SAMPLES)
def test_align_sample_writes_outputs_and_recovers_truth(tmp_path, name):
    src = stack_path(name)
    before = digest(src)
    res = xcorr("align", src, "--out", tmp_path / "out", "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert "frames of 120x160" in res.stdout and "FFT reference" in res.stdout
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["aligned.tif", "drift.png", "quality.png",
                                                      "shifts.csv", "shifts.json"]
    rows = list(csv.DictReader(open(out / "shifts.csv")))
    assert list(rows[0]) == ["frame", "source", "dy", "dx", "peak", "confidence", "low_confidence", "fft_dy",
                             "fft_dx", "agree"]
    got = np.array([[float(r["dy"]), float(r["dx"])] for r in rows])
    assert np.abs(got - truth(name)).max() <= 0.1
    with tifffile.TiffFile(out / "aligned.tif") as tif:
        assert tif.is_imagej and tif.series[0].shape == (12, 120, 160)
    assert (out / "drift.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((out / "shifts.json").read_text())
    assert doc["settings"]["normalization"] == "zncc" and len(doc["frames"]) == 12
    assert digest(src) == before


def test_align_folder_json_and_previous(tmp_path):
    src = folder_path("hubble")
    res = xcorr("align", src, "--out", tmp_path, "--reference", "previous", "--max-shift", "8",
                "--json", "--device", "cpu", "--no-aligned")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    got = np.array([[f["dy"], f["dx"]] for f in doc["frames"]])
    assert np.abs(got - truth("hubble")).max() <= 0.15
    assert doc["frames"][3]["source"] == "frame_4.tif"  # natural order
    assert not (tmp_path / "aligned.tif").exists()


def test_existing_outputs_need_force(tmp_path):
    args = ("align", stack_path("moon"), "--out", tmp_path, "--device", "cpu", "-q")
    assert xcorr(*args).returncode == 0
    stamp = (tmp_path / "shifts.csv").stat().st_mtime_ns
    assert_clean_error(xcorr(*args), "exists", "--force")
    assert (tmp_path / "shifts.csv").stat().st_mtime_ns == stamp
    assert xcorr(*args, "--force").returncode == 0


def write_frames(folder, frames, names=None):
    folder.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(frames):
        tifffile.imwrite(folder / (names[i] if names else f"f{i}.tif"), f)
    return folder


def smooth(rng, shape=(40, 50)):
    from scipy import ndimage as ndi

    return (ndi.gaussian_filter(rng.random(shape), 2) * 1000).astype(np.float32)


def test_empty_folder(tmp_path):
    (tmp_path / "in").mkdir()
    assert_clean_error(xcorr("align", tmp_path / "in", "--out", tmp_path / "o"), "empty")


def test_folder_without_tiffs(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("hello")
    assert_clean_error(xcorr("align", tmp_path / "in", "--out", tmp_path / "o"), "TIFF")


def test_mixed_shapes_names_the_file(tmp_path, rng):
    src = write_frames(tmp_path / "in", [smooth(rng), smooth(rng), smooth(rng, (41, 50))])
    before = digest(src)
    assert_clean_error(xcorr("align", src, "--out", tmp_path / "o"), "f2.tif")
    assert digest(src) == before
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_corrupt_tiff(tmp_path):
    bad = tmp_path / "bad.tif"
    bad.write_bytes(b"II*\x00" + os.urandom(200))
    assert_clean_error(xcorr("align", bad, "--out", tmp_path / "o"), "bad.tif")


def test_missing_path(tmp_path):
    assert_clean_error(xcorr("align", tmp_path / "nope.tif"), "nope.tif")


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_nan_or_inf_pixels(tmp_path, rng, value):
    frames = np.stack([smooth(rng) for _ in range(3)])
    frames[1, 5, 7] = value
    tifffile.imwrite(tmp_path / "s.tif", frames, photometric="minisblack")
    res = xcorr("align", tmp_path / "s.tif", "--out", tmp_path / "o", "--device", "cpu")
    assert res.returncode == 0, res.stderr  # the frame is flagged, never given a number
    assert "1 frame with NaN or Inf pixels" in res.stdout
    rows = list(csv.DictReader(open(tmp_path / "o" / "shifts.csv")))
    assert rows[1]["dy"] == rows[1]["dx"] == "nan"
    assert rows[1]["low_confidence"] == "true" and rows[1]["agree"] == "false"
    assert all(r["dy"] != "nan" for r in (rows[0], rows[2]))


def test_constant_frame_is_documented_nan(tmp_path, rng):
    frames = np.stack([smooth(rng), np.full((40, 50), 3, np.float32), smooth(rng)])
    tifffile.imwrite(tmp_path / "s.tif", frames, photometric="minisblack")
    res = xcorr("align", tmp_path / "s.tif", "--out", tmp_path / "o", "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert "1 constant frame: shift undefined" in res.stdout
    row = list(csv.DictReader(open(tmp_path / "o" / "shifts.csv")))[1]
    assert row["dy"] == "nan" and row["agree"] == "false"


def test_one_pixel_frames(tmp_path):
    src = write_frames(tmp_path / "in", [np.ones((1, 1), np.uint16) * i for i in range(3)])
    assert_clean_error(xcorr("align", src, "--out", tmp_path / "o"), "cannot be registered")


def test_zero_size_frames(tmp_path):
    tifffile.imwrite(tmp_path / "s.tif", np.ones((0, 4), np.uint16))
    assert_clean_error(xcorr("align", tmp_path / "s.tif", "--out", tmp_path / "o"))


def test_unwritable_output_folder(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where a folder must be: fails for root too
    assert_clean_error(xcorr("align", stack_path("moon"), "--out", blocker / "sub"))


@pytest.mark.parametrize("args,words", [
    (("--max-shift", "a,b"), ("--max-shift",)),
    (("--reference", "999"), ("out of range",)),
    (("--reference", "bogus"), ("unknown reference",)),
    (("--prefilter", "median:3"), ("prefilter",)),
    (("--device", "gpu"), ("--device gpu",)),
])
def test_bad_align_arguments(tmp_path, args, words):
    if args[0] == "--device":
        from xcorr_app import backend

        if backend.gpu_available():
            pytest.skip("a GPU is usable here")
    assert_clean_error(xcorr("align", stack_path("moon"), "--out", tmp_path, *args), *words)


def test_filter_writes_stack_and_matches_scipy(tmp_path):
    from scipy import ndimage as ndi

    out = tmp_path / "f.tif"
    res = xcorr("filter", stack_path("moon"), "--kernel", "gaussian:1.5", "--mode", "nearest",
                "--out", out, "--device", "cpu")
    assert res.returncode == 0, res.stderr
    got = tifffile.imread(out)
    src = tifffile.imread(stack_path("moon")).astype(np.float32)
    want = np.stack([ndi.gaussian_filter(f, 1.5, mode="nearest") for f in src])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
    assert_clean_error(xcorr("filter", stack_path("moon"), "--kernel", "gaussian:1.5", "--out", out),
                       "--force")


@pytest.mark.parametrize("spec", ["median:3", "gaussian:x", "nope.npy"])
def test_filter_bad_kernel(tmp_path, spec):
    assert_clean_error(xcorr("filter", stack_path("moon"), "--kernel", spec, "--out",
                             tmp_path / "f.tif"))


def test_filter_npy_kernel(tmp_path):
    from scipy import ndimage as ndi

    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "w.npy", w)
    res = xcorr("filter", stack_path("hubble"), "--kernel", tmp_path / "w.npy", "--out",
                tmp_path / "f.tif", "--device", "cpu", "-q")
    assert res.returncode == 0, res.stderr
    src = tifffile.imread(stack_path("hubble")).astype(np.float32)
    want = np.stack([ndi.correlate(f, w) for f in src])
    np.testing.assert_allclose(tifffile.imread(tmp_path / "f.tif"), want, rtol=1e-5, atol=1e-2)


def test_info_lists_kernel_sources():
    res = xcorr("info")
    assert res.returncode == 0, res.stderr
    assert "overlap_xcorr.cu" in res.stdout and "backend:" in res.stdout
    assert "kernels shipped built: " in res.stdout  # how many, or how to build them


def test_help_texts():
    for cmd in ([], ["align"], ["filter"], ["info"]):
        res = xcorr(*cmd, "--help")
        assert res.returncode == 0 and "Usage" in res.stdout


def test_reference_file_and_mean(tmp_path):
    frames = tifffile.imread(stack_path("hubble"))
    tifffile.imwrite(tmp_path / "ref.tif", frames[0])
    res = xcorr("align", stack_path("hubble"), "--reference", tmp_path / "ref.tif", "--out",
                tmp_path / "a", "--device", "cpu", "--json", "--no-aligned")
    assert res.returncode == 0, res.stderr
    got = np.array([[f["dy"], f["dx"]] for f in json.loads(res.stdout)["frames"]])
    assert np.abs(got - truth("hubble")).max() <= 0.1
    res = xcorr("align", stack_path("hubble"), "--reference", "mean", "--out", tmp_path / "b",
                "--device", "cpu", "--json", "--no-aligned")
    assert res.returncode == 0, res.stderr
    got = np.array([[f["dy"], f["dx"]] for f in json.loads(res.stdout)["frames"]])
    rel = got - got[0]  # against the mean: the same drift up to a constant offset
    assert np.abs(rel - truth("hubble")).max() <= 0.1
    tifffile.imwrite(tmp_path / "small.tif", frames[0][:50])
    assert_clean_error(xcorr("align", stack_path("hubble"), "--reference", tmp_path / "small.tif",
                             "--out", tmp_path / "c"), "reference image")


def _interrupt_when(proc, ready, timeout=120.0):
    import signal
    import time

    t0 = time.monotonic()
    while not ready() and proc.poll() is None and time.monotonic() - t0 < timeout:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


@pytest.mark.parametrize("phase", ["measuring", "writing"])
def test_sigint_leaves_no_partial_output_and_inputs_unchanged(tmp_path, rng, phase):
    stack = rng.integers(0, 4000, size=(800, 192, 192), dtype=np.uint16)  # a window to hit
    src = tmp_path / "s.tif"
    tifffile.imwrite(src, stack, imagej=True, metadata={"axes": "TYX"})
    before = digest(src)
    out = tmp_path / "o"
    env = child_env()
    # SIGINT back to its default in the child: a test run started in the background (nohup,
    # `cmd &`) passes SIGINT on as ignored, and Python then installs no KeyboardInterrupt
    proc = subprocess.Popen(from_a_terminal("align", src, "--out", out, "--device", "cpu",
                                            "--max-shift", "2", "--no-verify", "--prefilter",
                                            "none", "--chunk-frames", "8"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if phase == "measuring":
        ready = lambda: out.exists()  # noqa: E731 - outputs checked, measuring started
    else:
        ready = lambda: out.exists() and any(p.name.startswith(".aligned.tif")  # noqa: E731
                                             for p in out.iterdir())
    rc, err = _interrupt_when(proc, ready)
    assert rc == 130 and "interrupted" in err and "Traceback" not in err
    assert not out.exists() or not any(out.iterdir()), list(out.iterdir())
    assert digest(src) == before


def test_align_new_options_end_to_end(tmp_path):
    src = stack_path("moon")
    before = digest(src)
    res = xcorr("align", src, "--out", tmp_path / "o", "--device", "cpu", "--max-shift", "12",
                "--reference", "mean:4", "--window", "tukey", "--min-confidence", "1.5",
                "--interpolate-low", "--crop", "--resample", "fourier", "--max-memory", "64M",
                "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["settings"]["reference"] == "mean:4" and doc["settings"]["crop"] is True
    assert doc["device"] == "cpu" and "numpy" in doc["versions"]
    assert "low_confidence" in doc["frames"][0]
    aligned = tifffile.imread(tmp_path / "o" / "aligned.tif")
    assert aligned.shape[0] == 12 and aligned.shape[1] < 120 and aligned.shape[2] < 160
    assert digest(src) == before


@pytest.mark.parametrize("args,words", [
    (["--interpolate-low"], "--min-confidence"),
    (["--max-memory", "lots"], "memory size"),
    (["--max-memory", "1K"], "too small"),
    (["--window", "kaiser"], "unknown window"),
])
def test_bad_new_align_options(tmp_path, args, words):
    assert_clean_error(xcorr("align", stack_path("moon"), "--out", tmp_path / "o", "--device",
                             "cpu", *args), words)


def test_gpus_option_errors(tmp_path):
    """--gpus without a usable GPU, or with a bad list: one clear line."""
    path = stack_path("cell")
    res = xcorr("align", path, "--gpus", "0,x", "--out", tmp_path / "a")
    if res.returncode != 0 and "needs CUDA GPUs" in res.stderr:
        assert_clean_error(res, "--gpus needs CUDA GPUs")
    else:
        assert_clean_error(res, "--gpus '0,x': give GPU numbers")
    assert_clean_error(xcorr("filter", path, "--kernel", "box:3", "--gpus", "0", "--device",
                             "cpu", "--out", tmp_path / "f.tif"), "--device cpu")
    assert not (tmp_path / "a").exists() and not (tmp_path / "f.tif").exists()


def test_shifts_json_is_standard_json_without_the_check(tmp_path):
    """--no-verify leaves the agreement undefined: null in shifts.json, never a bare NaN."""
    res = xcorr("align", stack_path("cell"), "--no-verify", "--out", tmp_path / "o",
                "--device", "cpu")
    assert res.returncode == 0, res.stderr

    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    doc = json.loads((tmp_path / "o" / "shifts.json").read_text(), parse_constant=refuse)
    assert doc["summary"]["agreement"] is None


@pytest.mark.parametrize("out", ["shifts.csv", "result.tif", "afile"])
def test_align_out_must_be_a_folder(tmp_path, out):
    (tmp_path / "afile").write_text("x")
    res = xcorr("align", stack_path("cell"), "--out", tmp_path / out, "--device", "cpu")
    assert_clean_error(res, "--out is the folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_filter_out_must_be_a_tiff_name(tmp_path):
    res = xcorr("filter", stack_path("cell"), "--kernel", "gaussian:1", "--out",
                tmp_path / "x.png", "--device", "cpu")
    assert_clean_error(res, ".tif or .tiff")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("extra", [("--mode", "reflect"), ("--mode", "constant", "--cval", "3")])
def test_a_bank_refuses_a_boundary_mode_it_would_ignore(tmp_path, extra):
    """--bank pads with zeros: --mode and --cval were silently ignored."""
    src = tmp_path / "two.tif"
    tifffile.imwrite(src, np.zeros((3, 2, 24, 24), np.uint16), imagej=True,
                     metadata={"axes": "TCYX"})
    res = xcorr("filter", src, "--bank", "dog:1,2,4", *extra, "--out", tmp_path / "b.tif",
                "--device", "cpu")
    assert_clean_error(res, "to --kernel only", "drop --mode")
    assert not (tmp_path / "b.tif").exists()
    # (a --mix weighs each pixel's channels: a mode and a value past the edge were ignored too)
    res = xcorr("filter", src, "--mix", "1,1", *extra, "--out", tmp_path / "m.tif",
                "--device", "cpu")
    assert_clean_error(res, "to --kernel only", "no neighbours")


def test_a_cval_without_mode_constant_is_refused(tmp_path):
    """--cval 7 with the default --mode reflect was silently ignored."""
    res = xcorr("filter", stack_path("cell"), "--kernel", "gaussian:1", "--cval", "7", "--out",
                tmp_path / "f.tif", "--device", "cpu")
    assert_clean_error(res, "--cval applies to --mode constant, not reflect")
    assert not (tmp_path / "f.tif").exists()


def test_info_names_a_kernel_dir_variable_that_holds_no_sources(tmp_path, monkeypatch):
    """XCORR_KERNEL_DIR at an empty folder: the error said to reinstall xcorr-app and never
    named the variable."""
    from click.testing import CliRunner

    from xcorr_app.cli._main import cli

    monkeypatch.setenv("XCORR_KERNEL_DIR", str(tmp_path))
    res = CliRunner().invoke(cli, ["info"])
    assert res.exit_code == 2
    assert f"XCORR_KERNEL_DIR={tmp_path} holds no CUDA kernel sources" in res.output
