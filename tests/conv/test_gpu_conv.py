"""The im2win and pointwise kernels against the float64 reference on fresh random data, outputs
poisoned: the 12 layers of the im2win paper at batch 1 and 3, odd cases, every compiled
pointwise configuration and MobileNetV2's pointwise layers."""

import numpy as np
import pytest

from conftest import poisoned, rel_error
from xcorr_app.conv._im2win import IM2WIN_TILES, LAYOUTS
from xcorr_app.conv._reference import conv2d_reference

pytestmark = pytest.mark.gpu

#: (C_in, H, W, C_out, filter, stride) of the im2win paper's benchmark
IM2WIN_LAYERS = [(3, 227, 227, 96, 11, 4), (3, 231, 231, 96, 11, 4), (3, 227, 227, 64, 7, 2),
                 (32, 224, 224, 64, 7, 2), (96, 24, 24, 256, 5, 1), (256, 12, 12, 512, 3, 1),
                 (3, 224, 224, 64, 3, 1), (64, 112, 112, 128, 3, 1), (64, 56, 56, 64, 3, 1),
                 (128, 28, 28, 128, 3, 1), (256, 14, 14, 256, 3, 1), (512, 7, 7, 512, 3, 1)]


def _pair(v):
    return (v, v) if np.isscalar(v) else v


def _run_im2win(rng, n, c, h, w, f, kh, kw, stride, pad, tiles=None, win_bytes=None,
                layout="direct", splits=None):
    import cupy as cp

    from xcorr_app.conv import im2win_conv2d

    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((f, c, kh, kw)).astype(np.float32)
    (sy, sx), (py, px) = _pair(stride), _pair(pad)
    ho, wo = (h + 2 * py - kh) // sy + 1, (w + 2 * px - kw) // sx + 1
    out = poisoned(cp, (n, f, ho, wo))
    kw_ = {} if win_bytes is None else {"win_bytes": win_bytes, "waves": 0}
    got = im2win_conv2d(cp.asarray(x), cp.asarray(wt), stride, pad, out=out, tiles=tiles,
                        layout=layout, splits=splits, **kw_)
    assert got is out
    return rel_error(cp.asnumpy(got), conv2d_reference(x, wt, (sy, sx), (py, px)))


@pytest.mark.parametrize("layer", IM2WIN_LAYERS, ids=lambda l: "x".join(map(str, l)))
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_im2win_paper_layers(rng, layer, batch, layout):
    c, h, w, f, k, s = layer
    assert _run_im2win(rng, batch, c, h, w, f, k, k, s, 0, layout=layout) <= 1e-5


@pytest.mark.parametrize("case", [
    (1, 1, 1, 1, 1, 1, 1, 1, 0),      # 1x1 image, 1x1 filter
    (2, 1, 9, 7, 1, 3, 3, 1, 1),      # C_in = 1, C_out = 1, padding
    (3, 5, 17, 13, 7, 2, 2, 3, 0),    # stride larger than the filter
    (2, 7, 31, 33, 130, 5, 3, 2, 2),  # non-square filter, C_out over a tile
    (1, 3, 5, 5, 3, 5, 5, 1, 2),      # filter as large as the image, padded
    (3, 33, 11, 40, 65, 4, 4, 1, 1),  # even filter, K not a multiple of 4
    (2, 3, 6, 35, 4, 2, 5, (1, 3), (0, 2)),  # strides and paddings differing by axis
    (1, 2, 40, 3, 33, 9, 1, (4, 1), (3, 0)),
])
@pytest.mark.parametrize("tiles", IM2WIN_TILES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_im2win_odd_cases_every_tile(rng, case, tiles, layout):
    assert _run_im2win(rng, *case, tiles=tiles, layout=layout) <= 1e-5


def test_tuned_tiles_are_remembered(rng, monkeypatch, tmp_path):
    import cupy as cp

    from xcorr_app._cuda import tuning
    from xcorr_app.conv import _im2win as gpu_conv

    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    tuning.forget_memory()

    x = cp.asarray(rng.standard_normal((2, 5, 30, 26)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((7, 5, 3, 3)).astype(np.float32))
    a = gpu_conv.im2win_conv2d(x, w, 1, 1)
    calls = []
    monkeypatch.setattr(tuning, "time_gpu", lambda *a, **k: calls.append(1) or 1.0)
    tiles, splits = gpu_conv.tuned_plan(x, w, (1, 1), (1, 1), "direct")
    assert calls == []  # remembered: not measured again
    tuning.forget_memory()
    assert gpu_conv.tuned_plan(x, w, (1, 1), (1, 1), "direct") == (tiles, splits)  # from disk
    assert calls == []
    assert tiles in IM2WIN_TILES and splits >= 1
    b = gpu_conv.im2win_conv2d(x, w, 1, 1, tune=False)
    assert rel_error(cp.asnumpy(a), cp.asnumpy(b)) <= 1e-6


@pytest.mark.parametrize("tiles", IM2WIN_TILES)
@pytest.mark.parametrize("splits", [2, 3, 1000])
@pytest.mark.parametrize("case", [
    (2, 37, 9, 11, 70, 3, 3, 1, 1),     # 333 k: 42 steps, the last split shorter
    (1, 5, 6, 7, 3, 2, 2, 1, 0),        # 20 k: fewer steps than splits
    (3, 64, 7, 7, 130, 3, 3, 1, 1),     # M over two tiles, columns not a multiple of 4
])
def test_split_k_every_tile(rng, tiles, splits, case):
    """K split over blocks that add their sums in turn (more splits than steps: one per step)."""
    assert _run_im2win(rng, *case, tiles=tiles, splits=splits) <= 1e-5


def test_split_k_is_deterministic_and_reusable(rng):
    """Splits add in a fixed order: repeated runs are bit-identical, and the turn counters are
    back at zero after each launch (a later launch, another tile, still waits correctly)."""
    import cupy as cp

    from xcorr_app.conv import im2win_conv2d

    x = cp.asarray(rng.standard_normal((2, 96, 12, 12)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((40, 96, 3, 3)).astype(np.float32))
    runs = [im2win_conv2d(x, w, 1, 1, tiles=t, splits=5) for t in IM2WIN_TILES * 2]
    for r in runs[1:]:
        assert rel_error(cp.asnumpy(r), cp.asnumpy(runs[0])) <= 1e-6
    for a, b in zip(runs[:len(IM2WIN_TILES)], runs[len(IM2WIN_TILES):]):
        assert bool((a == b).all())


@pytest.mark.parametrize("images_per_group", [1, 2, 4])
def test_im2win_batch_in_groups(rng, images_per_group):
    """The batch transformed and convolved a few images at a time (the last group shorter)."""
    c, h, w, kh, stride, pad = 6, 19, 23, 3, 2, 1
    ho = (h + 2 * pad - kh) // stride + 1
    per_image = c * ho * (w + 2 * pad) * kh * 4
    assert _run_im2win(rng, 5, c, h, w, 9, kh, kh, stride, pad,
                       win_bytes=images_per_group * per_image, layout="im2win") <= 1e-5


@pytest.mark.parametrize("images_per_launch", [1, 2])
def test_direct_batch_in_launches(rng, monkeypatch, images_per_launch):
    """Batches whose columns pass the kernel's 32-bit index go in several launches."""
    from xcorr_app.conv import _im2win as gpu_conv

    ho = wo = (20 + 2 - 3) // 1 + 1
    monkeypatch.setattr(gpu_conv, "MAX_COLUMNS", images_per_launch * ho * wo)
    assert _run_im2win(rng, 3, 4, 20, 20, 5, 3, 3, 1, 1) <= 1e-5


def test_filter_and_input_are_not_modified(rng):
    import cupy as cp

    from xcorr_app.conv import im2win_conv2d

    x = cp.asarray(rng.standard_normal((2, 3, 9, 8)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((4, 3, 3, 2)).astype(np.float32))
    x0, w0 = x.copy(), w.copy()
    for layout in LAYOUTS:
        im2win_conv2d(x, w, 1, 1, layout=layout)
    assert bool((x == x0).all()) and bool((w == w0).all())


def _run_pointwise(rng, n, c, h, w, f, config=None):
    import cupy as cp

    from xcorr_app.conv._im2win import pointwise_conv2d

    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((f, c)).astype(np.float32)
    out = poisoned(cp, (n, f, h, w))
    got = pointwise_conv2d(cp.asarray(x), cp.asarray(wt), out=out, config=config)
    return rel_error(cp.asnumpy(got), conv2d_reference(x, wt[:, :, None, None]))


def test_every_pointwise_configuration(rng):
    from xcorr_app.conv._dynamic_blocking import configurations

    for cfg in configurations():
        for shape in [(3, 37, 5, 7, 19), (1, 1, 1, 1, 1), (2, 70, 4, 4, 130)]:
            err = _run_pointwise(rng, *shape, config=cfg)
            assert err <= 1e-5, (cfg, shape, err)


@pytest.mark.parametrize("layer", [(32, 16, 112), (16, 96, 112), (96, 24, 56), (144, 32, 28),
                                   (192, 64, 14), (576, 160, 7), (960, 320, 7), (320, 1280, 7)])
@pytest.mark.parametrize("batch", [1, 3])
def test_pointwise_mobilenet_layers_planned(rng, layer, batch):
    c, f, hw = layer
    assert _run_pointwise(rng, batch, c, hw, hw, f) <= 1e-5


def test_conv2d_measures_pointwise_against_im2win(rng, monkeypatch, tmp_path):
    """1x1 filters at stride 1 without padding: the two pointwise kernels and im2win's measured
    on the first call, the fastest kept (and remembered); every method gives the reference's."""
    import cupy as cp

    from xcorr_app._cuda import tuning
    from xcorr_app.conv import _api as conv

    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))  # nothing measured yet
    tuning.forget_memory()
    x = rng.standard_normal((3, 37, 9, 7)).astype(np.float32)
    w = rng.standard_normal((19, 37, 1, 1)).astype(np.float32)
    ref = conv2d_reference(x, w)
    xg, wg = cp.asarray(x), cp.asarray(w)
    assert conv.chosen_method(xg, wg) == "auto: not measured yet"
    assert conv.chosen_method(xg, wg, padding=1) == "im2win"  # padded: not pointwise
    got = {m: cp.asnumpy(conv.conv2d(xg, wg, method=m))
           for m in ("auto", "im2win", "pointwise", "mma")}
    chosen = conv.chosen_method(xg, wg)
    assert chosen in ("im2win", "pointwise", "mma")
    assert all(rel_error(g, ref) <= 1e-5 for g in got.values())
    tuning.forget_memory()  # from disk in a later process
    assert conv.chosen_method(xg, wg) == chosen
    assert rel_error(cp.asnumpy(conv.conv2d(xg, wg)), ref) <= 1e-5


@pytest.mark.parametrize("first", ["misaligned view", "float64"])
def test_conv2d_pointwise_choice_from_an_odd_first_call(rng, monkeypatch, tmp_path, first):
    """The measurement on a first call whose input is a view off 16-byte alignment or not
    float32 (both kernels measured on an aligned float32 copy); later calls of either kind
    agree with the reference."""
    import cupy as cp

    from xcorr_app._cuda import tuning
    from xcorr_app.conv import _api as conv

    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))
    tuning.forget_memory()
    x = rng.standard_normal((2, 24, 11, 9)).astype(np.float32)
    w = rng.standard_normal((13, 24, 1, 1)).astype(np.float32)
    ref = conv2d_reference(x, w)
    buf = cp.empty(x.size + 1, cp.float32)
    odd = buf[1:].reshape(x.shape)  # C-contiguous, 4 bytes past an aligned start
    odd[...] = cp.asarray(x)
    assert odd.data.ptr % 16
    inputs = {"misaligned view": odd, "float64": cp.asarray(x, cp.float64)}
    wg = cp.asarray(w)
    got = conv.conv2d(inputs[first], wg)  # measures
    assert conv.chosen_method(inputs[first], wg) in ("im2win", "pointwise", "mma")
    for xin in (inputs[first], odd, cp.asarray(x), inputs[first]):
        assert rel_error(cp.asnumpy(conv.conv2d(xin, wg)), ref) <= 1e-5
    assert rel_error(cp.asnumpy(got), ref) <= 1e-5


def test_api_on_cupy(rng):
    import cupy as cp

    from xcorr_app import conv2d, pointwise

    x = rng.standard_normal((2, 3, 20, 21)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    got = conv2d(cp.asarray(x), cp.asarray(w), stride=2, padding=1)
    assert isinstance(got, cp.ndarray) and got.dtype == cp.float32
    assert rel_error(cp.asnumpy(got), conv2d_reference(x, w, 2, 1)) <= 1e-5
    mix = pointwise(cp.asarray(x), cp.asarray(w[:, :, 1, 1]))
    assert rel_error(cp.asnumpy(mix), conv2d_reference(x, w[:, :, 1:2, 1:2])) <= 1e-5


def test_repeated_runs_are_identical(rng):
    import cupy as cp

    from xcorr_app import conv2d

    x = cp.asarray(rng.standard_normal((2, 16, 30, 30)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((24, 16, 3, 3)).astype(np.float32))
    a, b = conv2d(x, w, padding=1), conv2d(x, w, padding=1)
    assert bool((a == b).all())


def test_banks_and_features_on_the_gpu(tmp_path):
    """xcorr filter --bank on the GPU gives the CPU's channels; align --features on the GPU
    recovers the sample's drift."""
    import tifffile

    from sample_paths import stack_path, truth
    from cli_helpers import xcorr
    from xcorr_app import align

    path = stack_path("hubble")
    outs = {}
    for dev in ("cpu", "gpu"):
        outs[dev] = tmp_path / f"{dev}.tif"
        res = xcorr("filter", path, "--bank", "gabor:2,4", "--device", dev, "--out", outs[dev])
        assert res.returncode == 0, res.stderr
    cpu, gpu = tifffile.imread(outs["cpu"]), tifffile.imread(outs["gpu"])
    assert gpu.shape == cpu.shape == (12, 4, *tifffile.imread(path).shape[1:])
    assert rel_error(gpu, cpu) <= 1e-5
    multi = tmp_path / "gpus.tif"
    res = xcorr("filter", path, "--bank", "gabor:2,4", "--gpus", "all", "--chunk-frames", "5",
                "--out", multi)
    assert res.returncode == 0, res.stderr
    # chunks of 5 frames may split K differently from 12 (the tuned plan is per batch size)
    assert rel_error(tifffile.imread(multi), gpu) <= 1e-5
    res = align(path, max_shift=12, device="gpu", features="dog:1,2,4")
    assert np.sqrt(((res.shifts - truth("hubble")) ** 2).mean()) <= 0.1


def test_pointwise_on_a_view_at_an_odd_offset(rng):
    """A C-contiguous view 4 bytes into its buffer (the kernel reads 16 bytes at a time)."""
    import cupy as cp

    from xcorr_app import pointwise

    base = cp.asarray(rng.standard_normal(1 + 2 * 3 * 4 * 8).astype(np.float32))
    x = base[1:].reshape(2, 3, 4, 8)
    assert x.flags.c_contiguous and x.data.ptr % 16
    w = rng.standard_normal((5, 3)).astype(np.float32)
    got = pointwise(x, cp.asarray(w))
    assert rel_error(cp.asnumpy(got), conv2d_reference(cp.asnumpy(x), w[:, :, None, None])) <= 1e-5


@pytest.mark.parametrize("x_shape, w_shape, stride, pad", [
    ((3, 8, 20, 18), (5, 8, 3, 3), 1, 1),        # im2win or Winograd
    ((2, 6, 15, 17), (4, 6, 5, 5), (2, 1), 2),   # im2win
    ((2, 16, 9, 9), (24, 16, 1, 1), 1, 0),       # pointwise
])
def test_repeated_calls_take_the_prepared_path(rng, monkeypatch, x_shape, w_shape, stride,
                                                pad):
    import cupy as cp

    from xcorr_app.conv import _api as conv

    checks = []
    check = conv.check_arrays
    monkeypatch.setattr(conv, "check_arrays", lambda x, w: checks.append(1) or check(x, w))
    w = rng.standard_normal(w_shape).astype(np.float32)
    xs = [rng.standard_normal(x_shape).astype(np.float32) for _ in range(3)]
    conv._PREPARED.clear()
    outs = [conv.conv2d(cp.asarray(x), cp.asarray(w), stride, pad) for x in xs]
    assert len(checks) == 1  # the second and third calls took the prepared call
    sy, sx = (stride, stride) if np.isscalar(stride) else stride
    for x, out in zip(xs, outs):  # fresh data through it, each call its own output
        assert rel_error(cp.asnumpy(out), conv2d_reference(x, w, (sy, sx), (pad, pad))) <= 1e-5
    assert len({o.data.ptr for o in outs}) == 3
