"""Piecewise-rigid registration on Dask (``xcorr_app.distributed._dask.align(patches=...)``,
``xcorr align --patches --workers``): the motion field one process measures, bit for bit on
the CPU, from a TIFF path and from a dask array, with template passes and ``refined``."""

import numpy as np
import pytest
import tifffile

from cli_helpers import assert_clean_error, digest, xcorr
from xcorr_app import align
from xcorr_app.bench._align_data import nonrigid_stack
from xcorr_app.errors import InputError

distributed = pytest.importorskip("dask.distributed")  # (not tests/distributed)
da = pytest.importorskip("dask.array")
xdask = pytest.importorskip("xcorr_app.distributed._dask")

pytestmark = pytest.mark.slow

FIELD = ("motion_field", "patch_confidence", "patch_low", "patch_centres", "patch_template")
#: prefilter given (not auto), so that the refined comparison builds the same options
RUN = dict(max_shift=14, device="cpu", verify=False, prefilter="gaussian:1", chunk_frames=2,
           patches=(3, 3))


@pytest.fixture(scope="module")
def deformed():
    return nonrigid_stack(np.random.default_rng(27), 8, (192, 192), 10.0, 3.0, 400.0,
                          "coins")[0]


@pytest.fixture(scope="module")
def stack_file(tmp_path_factory, deformed):
    path = tmp_path_factory.mktemp("dask_patches") / "deformed.tif"
    tifffile.imwrite(path, deformed)
    return path


def assert_same_field(got, want):
    np.testing.assert_array_equal(got.shifts, want.shifts)
    for name in FIELD:
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert got.settings["patches"] == want.settings["patches"]
    assert [n for n in got.notes if "patch" in n] == [n for n in want.notes if "patch" in n]


@pytest.mark.parametrize("scheduler", ["sync", "threads"])
@pytest.mark.parametrize("passes", [0, 1])
def test_path_tasks_give_the_field_of_one_process(stack_file, scheduler, passes):
    """Tasks of 4 frames each read their own frames of the TIFF (chunks of 2: the template
    sums are added as one process adds them)."""
    before = digest(stack_file)
    want = align(stack_file, patch_template_passes=passes, **RUN)
    got = xdask.align(stack_file, patch_template_passes=passes, task_frames=4,
                      scheduler=scheduler, **RUN)
    assert got.settings["dask"]["task_frames"] == [4, 4]
    assert got.settings["patches"]["template_passes"] == passes
    assert got.motion_field.shape == (8, 3, 3, 2)
    assert_same_field(got, want)
    assert digest(stack_file) == before


def test_dask_array_blocks_on_two_workers(deformed, client):
    """Blocks of 3 frames (not a multiple of the chunk) on two worker processes, a template
    pass: the same field (the float32 template absorbs the sums' order here)."""
    want = align(deformed, patch_template_passes=1, **RUN)
    got = xdask.align(da.from_array(deformed, chunks=(3, -1, -1)), patch_template_passes=1,
                      client=client, **RUN)
    assert got.settings["dask"]["tasks"] == 3
    assert_same_field(got, want)


def test_refined_template_and_a_pass_as_one_process(deformed):
    """``reference="refined"``: the rigid template passes and the patch template run as in one
    process (the template sums of the tasks added up in frame order)."""
    got = xdask.align(da.from_array(deformed, chunks=(4, -1, -1)), reference="refined",
                      patch_template_passes=1, scheduler="threads", **RUN)
    want = align(deformed, reference="refined", patch_template_passes=1, **RUN)
    np.testing.assert_allclose(got.shifts, want.shifts, atol=1e-6)
    np.testing.assert_allclose(got.motion_field, want.motion_field, atol=1e-6)
    np.testing.assert_allclose(got.patch_template, want.patch_template, atol=1e-4)
    first = xdask.align(da.from_array(deformed, chunks=(4, -1, -1)), scheduler="threads", **RUN)
    assert not np.array_equal(first.patch_template, got.patch_template)  # can fail


@pytest.mark.parametrize("kwargs,words", [
    (dict(patches=(60, 60)), ["too small"]),
    (dict(patches=(2, 2), reference="previous"), ["previous"]),
    (dict(patches=(2, 2), patch_template_passes=3), ["patch_template_passes"]),
    (dict(patches=(2, 2), max_deviation=-1), ["max_deviation must be >= 0"]),
])
def test_bad_patch_arguments_fail_before_any_task(kwargs, words, monkeypatch):
    def no_tasks(*a, **k):
        raise AssertionError("a task ran")

    monkeypatch.setattr(xdask, "_compute", no_tasks)
    stack = np.random.default_rng(0).random((3, 64, 64))
    with pytest.raises(InputError) as err:
        xdask.align(stack, max_shift=4, device="cpu", scheduler="sync", **kwargs)
    assert "\n" not in str(err.value)
    for w in words:
        assert w in str(err.value)


def test_cli_workers_write_the_motion_field_of_one_process(stack_file, tmp_path):
    before = digest(stack_file)
    one, two = tmp_path / "one", tmp_path / "two"
    for out, extra in ((one, ()), (two, ("--workers", "2"))):
        res = xcorr("align", stack_file, "--max-shift", "14", "--device", "cpu", "--no-verify",
                    "--reference", "first", "--lucas-kanade", "off", "--patches", "3x3",
                    "--patch-template-passes", "1", "--chunk-frames", "2", "--out", out, *extra)
        assert res.returncode == 0, res.stderr
        assert "patches 3x3" in res.stdout
    assert "Dask cluster of 2 workers" in res.stdout
    a, b = np.load(one / "motion_field.npz"), np.load(two / "motion_field.npz")
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert (two / "motion_field.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (one / "shifts.csv").read_text() == (two / "shifts.csv").read_text()
    np.testing.assert_array_equal(tifffile.imread(one / "aligned.tif"),
                                  tifffile.imread(two / "aligned.tif"))
    assert digest(stack_file) == before


@pytest.mark.parametrize("args,words", [
    # without a GPU: "--gpus needs CUDA GPUs"; with one: the grid is too small
    (["--gpus", "0", "--patches", "60x60"], []),
    (["--workers", "2", "--device", "cpu", "--reference", "previous"], ["previous"]),
    (["--workers", "2", "--device", "cpu", "--patches", "60x60"], ["too small"]),
])
def test_cli_patch_errors_with_scale_out_are_one_line(stack_file, tmp_path, args, words):
    patches = [] if "--patches" in args else ["--patches", "3x3"]  # (an option given once)
    res = xcorr("align", stack_file, "--max-shift", "14", *patches, "--out",
                tmp_path / "out", *args)
    assert res.returncode == 2
    assert_clean_error(res, *words)
    assert not (tmp_path / "out").exists()
