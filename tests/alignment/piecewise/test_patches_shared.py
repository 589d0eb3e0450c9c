"""The patch pass with its frames shared out (``measure_field(executor=)``, what
``align(..., gpus=..., patches=...)`` and Dask run): on the CPU with threads standing in for
GPUs, the field of one run bit for bit; on GPUs, the field of one GPU."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from xcorr_app import align
from xcorr_app.alignment import AlignOptions
from xcorr_app.alignment.piecewise import measure_field
from xcorr_app.bench._align_data import nonrigid_stack
from xcorr_app.io import open_source

from synthetic import write_stack


def opts(passes):
    return AlignOptions(reference="first", max_shift=14, verify=False, prefilter="gaussian:1",
                        patches=(3, 3), patch_template_passes=passes)


@pytest.fixture(scope="module")
def deformed():
    return nonrigid_stack(np.random.default_rng(27), 8, (192, 192), 10.0, 3.0, 400.0,
                          "coins")[0]


@pytest.fixture(scope="module")
def rigid(deformed):
    return align(deformed, max_shift=14, device="cpu", verify=False,
                 prefilter="gaussian:1").shifts


class Threads:
    """An executor's stand-in: each range on its own thread with its own reader."""

    remote = True
    fixed_chunk, budget_per_range = 2, None

    def __init__(self, stack, ranges):
        self.stack, self.ranges = stack, ranges

    def map(self, fn, progress, before=False, upto=None):
        def one(r):
            with open_source(self.stack) as src:
                return fn(src, np, *r, None)

        with ThreadPoolExecutor(len(self.ranges)) as ex:
            return list(ex.map(one, self.ranges))


@pytest.mark.parametrize("passes", [0, 1, 2])
@pytest.mark.parametrize("ranges", [[(0, 4), (4, 8)], [(0, 3), (3, 5), (5, 8)]])
def test_ranges_on_threads_give_the_field_of_one_run(deformed, rigid, tmp_path, passes,
                                                     ranges):
    """Each range has its own reader (a TIFF, opened per thread) and accumulator; the
    template sums are added up in range order (exact here, where the float32 template absorbs
    the order of the float64 sums)."""
    path = write_stack(tmp_path / "s.tif", deformed)
    want = measure_field(opts(passes), path, rigid, np, 2)
    got = measure_field(opts(passes), path, rigid, np, 2, executor=Threads(path, ranges))
    for name in ("field", "confidence", "low", "template", "centres"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


def test_a_failing_range_fails_the_pass(deformed, rigid):
    with pytest.raises(ValueError):  # a range past the stack's end: its error reaches here
        measure_field(opts(0), deformed, rigid, np, 2, executor=Threads(deformed, [(0, 99)]))


# ------------------------------------------------------------------------------------ GPU

@pytest.mark.gpu
@pytest.mark.parametrize("passes", [0, 1])
def test_gpus_give_the_field_of_one_gpu(deformed, tmp_path, passes):
    """``gpus`` (every GPU, and GPU 0 alone) against one GPU and the CPU: the field up to the
    rounding of the rigid shifts (1e-4 px between GPU runs) and of the template sums."""
    path = write_stack(tmp_path / "s.tif", deformed)
    kw = dict(max_shift=14, verify=False, prefilter="gaussian:1", patches=(3, 3),
              patch_template_passes=passes, chunk_frames=2)
    one = align(path, device="gpu", lucas_kanade="off", boundary="linear", **kw)
    cpu = align(path, device="cpu", lucas_kanade="off", boundary="linear", **kw)
    for gpus in ("all", [0]):
        got = align(path, gpus=gpus, lucas_kanade="off", boundary="linear", **kw)
        assert got.settings["patches"] == one.settings["patches"]
        np.testing.assert_allclose(got.shifts, one.shifts, atol=1e-4)
        np.testing.assert_allclose(got.motion_field, one.motion_field, atol=1e-3)
        np.testing.assert_allclose(got.motion_field, cpu.motion_field, atol=1e-3)
        np.testing.assert_array_equal(got.patch_low, one.patch_low)
        np.testing.assert_allclose(got.patch_template, one.patch_template, rtol=1e-5,
                                   atol=1e-3)
