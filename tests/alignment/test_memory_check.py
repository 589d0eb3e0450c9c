"""The up-front memory check of align (one frame against --max-memory and the device's free
memory, before any frame is read) and huge frames measured in bands; the CLI's refusals and
its out-of-memory line, through a real subprocess."""

import sys
import textwrap

import numpy as np
import pytest

from cli_helpers import ROOT, assert_clean_error, digest, xcorr
from synthetic import drift_stack, write_stack
from xcorr_app import align
from xcorr_app.errors import InputError
from xcorr_app.streaming import frame_need

SHAPE = (150, 134)


def _band_budget(shape, max_shift, verify=True, itemsize=2):
    """A --max-memory (bytes) too small for one whole frame, enough for bands of 20 rows."""
    bound = (max_shift, max_shift)
    whole = frame_need(shape, itemsize, max_shift=bound, verify=verify).total
    band = frame_need(shape, itemsize, max_shift=bound, verify=verify, band_rows=20).total
    assert band < whole
    return (whole + band) // 2


@pytest.fixture
def stack_file(tmp_path, rng):
    stack, truth = drift_stack(rng, n=5, shape=SHAPE, max_shift=4, peak_counts=500)
    return write_stack(tmp_path / "s.tif", stack), stack, truth


def test_a_frame_that_does_not_fit_is_refused_before_any_frame_is_read(stack_file,
                                                                       monkeypatch):
    path, _, _ = stack_file
    import xcorr_app.alignment._run as run

    def never(*a, **k):
        raise AssertionError("a frame was read before the memory check")

    monkeypatch.setattr(run, "prepared_reference", never)
    monkeypatch.setattr(run, "reference_image", never)
    before = digest(path)
    with pytest.raises(InputError, match="is too small for frames of 150x134") as err:
        align(path, max_shift=6, max_memory="200K", device="cpu")
    assert "max_shift" not in str(err.value) and "verify=False" in str(err.value)
    with pytest.raises(InputError) as err:
        align(path, max_memory="200K", verify=False, device="cpu")
    assert "max_shift=N" in str(err.value) and "verify=False" not in str(err.value)
    assert digest(path) == before


@pytest.mark.parametrize("reference", ["first", "previous", "mean"])
def test_bands_give_the_shifts_of_whole_frames(stack_file, reference):
    path, _, truth = stack_file
    whole = align(path, reference=reference, max_shift=6, device="cpu")
    banded = align(path, reference=reference, max_shift=6, device="cpu",
                   max_memory=_band_budget(SHAPE, 6))
    assert whole.settings["chunk_frames"] > 1 and banded.settings["chunk_frames"] == 1
    assert banded.plan.startswith("bands:rows=") and not whole.plan.startswith("bands")
    np.testing.assert_allclose(banded.shifts, whole.shifts, atol=1e-4, rtol=0)
    np.testing.assert_allclose(banded.confidence, whole.confidence, rtol=1e-3)
    np.testing.assert_array_equal(banded.fft_shifts, whole.fft_shifts)  # not tiled
    if reference == "first":
        assert np.abs(banded.shifts - truth).max() < 0.3


def test_phase_correlation_is_never_tiled(stack_file):
    path, _, _ = stack_file
    with pytest.raises(InputError, match="max_memory"):
        align(path, max_shift=6, normalization="phase", device="cpu",
              max_memory=_band_budget(SHAPE, 6))


@pytest.mark.gpu
def test_gpu_bands_give_the_shifts_of_whole_frames(stack_file):
    path, _, _ = stack_file
    whole = align(path, max_shift=6, device="gpu")
    bound = (6, 6)
    need = frame_need(SHAPE, 2, max_shift=bound, device="gpu").total
    band = frame_need(SHAPE, 2, max_shift=bound, device="gpu", band_rows=20).total
    banded = align(path, max_shift=6, device="gpu", max_memory=(need + band) // 2)
    assert banded.plan.startswith("bands:rows=")
    np.testing.assert_allclose(banded.shifts, whole.shifts, atol=1e-4, rtol=0)
    cpu = align(path, max_shift=6, device="cpu")
    np.testing.assert_allclose(banded.shifts, cpu.shifts, atol=1e-3, rtol=0)


# --- the CLI, through a subprocess -------------------------------------------------------


@pytest.mark.parametrize("given,advised,not_advised", [
    ((), ("--max-shift N", "--no-verify", "--max-memory"), ()),
    (("--max-shift", "6"), ("--no-verify", "--max-memory"), ("--max-shift",)),
    (("--max-shift", "6", "--no-verify"), ("--max-memory",), ("--max-shift", "--no-verify")),
])
def test_cli_refusal_is_one_line_exit_2_and_leaves_nothing(stack_file, given, advised,
                                                           not_advised):
    path, _, _ = stack_file
    out = path.parent / "out"
    before = digest(path)
    res = xcorr("align", path, "--out", out, "--device", "cpu", "--max-memory", "300K", *given)
    assert res.returncode == 2
    assert_clean_error(res, "--max-memory 300 KiB is too small for frames of 150x134",
                       "one frame needs at least", *advised)
    for option in not_advised:
        assert option not in res.stderr
    assert digest(path) == before and not out.exists()


def test_cli_runs_a_huge_frame_in_bands(stack_file):
    path, _, _ = stack_file
    budget = _band_budget(SHAPE, 6)
    runs = {}
    for name, extra in (("whole", ()), ("bands", ("--max-memory", str(budget)))):
        res = xcorr("align", path, "--out", path.parent / name, "--device", "cpu",
                    "--max-shift", "6", "--quiet", *extra)
        assert res.returncode == 0, res.stderr
        runs[name] = np.loadtxt(path.parent / name / "shifts.csv", delimiter=",", skiprows=1,
                                usecols=(2, 3))
    np.testing.assert_allclose(runs["bands"], runs["whole"], atol=1e-4, rtol=0)


def test_cli_memory_error_is_one_line_exit_2(stack_file):
    """A MemoryError the estimate did not foresee: one line that says what helps, exit 2."""
    path, _, _ = stack_file
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import xcorr_app.alignment as api
        def boom(*a, **k):
            raise MemoryError("Unable to allocate 7.45 GiB")
        api.align = boom
        from xcorr_app.cli import main
        sys.argv = ["xcorr", "align", {str(path)!r}, "--out", {str(path.parent / "o")!r},
                    "--device", "cpu"]
        main()
    """)
    import subprocess

    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 2
    assert_clean_error(res, "out of memory (Unable to allocate 7.45 GiB)", "--max-shift",
                       "--chunk-frames")
    assert not (path.parent / "o").exists()


def test_ranges_run_apart_refuse_frames_that_need_bands(stack_file):
    """A range measured apart (a Dask worker, another GPU) checks one frame up front too; it
    does not measure in bands."""
    from xcorr_app.alignment import AlignOptions
    from xcorr_app.alignment.rigid import frames_per_chunk
    from xcorr_app.io import open_source

    path, _, _ = stack_file
    opts = AlignOptions(max_shift=6, chunk_frames=64)
    with open_source(path, None) as src:
        assert frames_per_chunk(opts, src, np, None) > 1
        with pytest.raises(InputError, match="which runs shared out do not do"):
            frames_per_chunk(opts, src, np, _band_budget(SHAPE, 6))
        with pytest.raises(InputError, match="is too small for frames of 150x134"):
            frames_per_chunk(opts, src, np, 1000)
