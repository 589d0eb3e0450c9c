"""The prepared chunks kept between a GPU run's passes (``alignment/rigid/_prepared.py``): which
passes share them, when a run keeps none, and on the GPU that a run which takes them gives
the results of one that prepares every chunk again, the later passes preparing nothing."""

import dataclasses

import numpy as np
import pytest

from xcorr_app import align
from xcorr_app.alignment import _options
from xcorr_app.alignment.piecewise import _patch_pass
from xcorr_app.alignment.rigid import _prepared
from xcorr_app.alignment import AlignOptions
from xcorr_app.alignment.rigid import PreparedFrames, patch_key, prepare
from xcorr_app.alignment.rigid._prepared import pass_key
from xcorr_app.bench._align_data import nonrigid_stack
from xcorr_app.io import ArraySource


def test_the_patch_pass_shares_the_rigid_passes_key_only_where_it_prepares_alike():
    opts = AlignOptions()
    assert pass_key(opts) == patch_key(opts)  # the defaults: ZNCC, no window
    for change in (dict(window="hann"), dict(normalization="none"), dict(prefilter="none")):
        other = dataclasses.replace(opts, **change)
        assert (pass_key(other) == patch_key(other)) == ("prefilter" in change)
    assert pass_key(dataclasses.replace(opts, prefilter="none")) != pass_key(opts)


def test_take_gives_only_what_was_kept_for_that_key_and_range():
    key, other = ("a",), ("b",)
    kept = PreparedFrames(key, device=None)
    p = prepare(np.arange(3 * 4 * 5, dtype=np.uint16).reshape(3, 4, 5), np)
    kept.keep(other, 6, p)  # another preparation: not kept
    assert kept.take(key, 6, 3) is None
    kept.keep(key, 6, p)
    assert kept.take(key, 6, 3) is p and kept.take(other, 6, 3) is None
    assert kept.take(key, 6, 2) is None and kept.take(key, 7, 3) is None
    kept.release()
    assert kept.take(key, 6, 3) is None


def test_no_store_on_the_cpu():
    src = ArraySource(np.zeros((4, 8, 8), np.uint16))
    assert PreparedFrames.for_run(AlignOptions(), src, np) is None


@pytest.mark.gpu
def test_a_run_that_takes_kept_chunks_equals_one_that_prepares_again(monkeypatch):
    import cupy as cp

    stack, _ = nonrigid_stack(np.random.default_rng(11), 40, (131, 117), 6.0, 2.0, 400.0,
                              iterations=8)
    g = cp.asarray(stack)
    kw = dict(max_shift=10, device="gpu", patches=(2, 3), max_deviation=3, chunk_frames=16,
              reference="refined:1", lucas_kanade="off", boundary="linear",
              quality=False)  # (no periodic test: its few frames are prepared together, once
    # per run; the quality report prepares the aligned frames, not kept chunks)
    calls = {"rigid": 0, "patch": 0}
    real = _prepared.PreparedFrames.for_run

    def counting(name, fn):
        def wrapped(frames, *a, **k):
            calls[name] += len(frames) > 1  # chunks (a pass's reference is one frame)
            return fn(frames, *a, **k)
        return wrapped

    monkeypatch.setattr(_options, "prepare", counting("rigid", _options.prepare))
    monkeypatch.setattr(_patch_pass, "prepare", counting("patch", _patch_pass.prepare))
    kept = align(g, **kw)
    # 40 frames in chunks of 16: the first rigid pass prepares its 3 chunks, the template
    # pass and the patch pass take them
    assert calls == {"rigid": 3, "patch": 0}
    monkeypatch.setattr(_prepared.PreparedFrames, "for_run",
                        classmethod(lambda cls, *a: None))
    again = align(g, **kw)
    assert calls == {"rigid": 3 + 6, "patch": 3}
    monkeypatch.setattr(_prepared.PreparedFrames, "for_run", real)
    # the GPU's correlations add partial sums atomically: equal to float rounding
    np.testing.assert_allclose(kept.shifts, again.shifts, rtol=0, atol=1e-4)
    np.testing.assert_allclose(kept.motion_field, again.motion_field, rtol=0, atol=1e-4)
    assert np.isfinite(kept.motion_field).all()
