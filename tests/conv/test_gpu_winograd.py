"""The fused Winograd kernel against the float64 reference on fresh random data, outputs
poisoned: every tile on odd shapes and paddings (images smaller than a tile, channels and
filters past a block, partial tiles at the image edges), the 3x3 stride-1 layers of the im2win
paper, split-K, and ``conv2d``'s choice between it and the im2win kernel."""

import numpy as np
import pytest

from conftest import poisoned, rel_error
from test_gpu_conv import IM2WIN_LAYERS
from xcorr_app.conv._winograd import WINOGRAD_TILES
from xcorr_app.conv._reference import conv2d_reference

pytestmark = pytest.mark.gpu

#: (N, C, H, W, F, padding)
ODD_CASES = [
    (1, 1, 3, 3, 1, 0),          # one output (positive data: see _run)
    (2, 1, 1, 1, 1, 1),          # a 1x1 image, padded: one output from one value
    (3, 5, 17, 13, 7, 0),        # odd sizes: partial tiles on both edges
    (2, 9, 31, 33, 65, 1),       # C not a multiple of BLOCK_K, F past a 64-filter block
    (1, 3, 4, 70, 40, (0, 2)),   # paddings differing by axis, a wide image
    (2, 20, 6, 5, 3, (2, 0)),
    (1, 2, 5, 4, 33, 3),         # padding past the filter: outputs of padding only
    (5, 17, 9, 12, 130, 1),      # several images per block of tiles
]


def _run(rng, n, c, h, w, f, pad, **kw):
    import cupy as cp

    from xcorr_app.conv._winograd import winograd_conv2d

    py, px = (pad, pad) if np.isscalar(pad) else pad
    # a single output of normal data may cancel to a hundredth of its terms, and the relative
    # error of its float32 sum with it (seed 1014689372: 7.8e-6 for exact F(2x2, 3x3) float32
    # arithmetic); positive data keep that case a test of the kernel
    draw = rng.random if n * c * f * h * w <= 9 else rng.standard_normal
    x = draw((n, c, h, w)).astype(np.float32)
    wt = draw((f, c, 3, 3)).astype(np.float32)
    out = poisoned(cp, (n, f, h + 2 * py - 2, w + 2 * px - 2))
    got = winograd_conv2d(cp.asarray(x), cp.asarray(wt), pad, out=out, **kw)
    assert got is out
    return rel_error(cp.asnumpy(got), conv2d_reference(x, wt, (1, 1), (py, px))), got


@pytest.mark.parametrize("case", ODD_CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("tiles", WINOGRAD_TILES, ids=lambda t: "x".join(map(str, t)))
def test_every_tile_on_odd_cases(rng, case, tiles):
    assert _run(rng, *case, tiles=tiles, splits=1)[0] <= 1e-5


@pytest.mark.parametrize("layer", [l for l in IM2WIN_LAYERS if l[4] == 3 and l[5] == 1],
                         ids=lambda l: "x".join(map(str, l)))
@pytest.mark.parametrize("batch", [1, 3])
def test_paper_layers(rng, layer, batch):
    c, h, w, f, _, _ = layer
    assert _run(rng, batch, c, h, w, f, 0)[0] <= 1e-5
    assert _run(rng, batch, c, h, w, f, 1)[0] <= 1e-5


@pytest.mark.parametrize("tiles", WINOGRAD_TILES, ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("splits", [2, 3, 1000])
def test_split_k_every_tile(rng, tiles, splits):
    # 70 channels: 9 steps of 8, so 1000 splits means one step each
    err, _ = _run(rng, 2, 70, 11, 9, 37, 1, tiles=tiles, splits=splits)
    assert err <= 1e-5


def test_split_k_is_deterministic_and_reusable(rng):
    import cupy as cp

    from xcorr_app.conv._winograd import winograd_conv2d

    x = cp.asarray(rng.standard_normal((3, 64, 10, 12)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((40, 64, 3, 3)).astype(np.float32))
    runs = [cp.asnumpy(winograd_conv2d(x, w, 1, tiles=t, splits=4))
            for t in WINOGRAD_TILES for _ in range(2)]
    for a, b in zip(runs[::2], runs[1::2]):
        assert np.array_equal(a, b)  # one tile: bit-identical runs
    ref = conv2d_reference(cp.asnumpy(x), cp.asnumpy(w), (1, 1), (1, 1))
    assert all(rel_error(r, ref) <= 1e-5 for r in runs)


def test_inputs_are_not_modified(rng):
    import cupy as cp

    from xcorr_app.conv._winograd import winograd_conv2d

    x = cp.asarray(rng.standard_normal((2, 12, 9, 10)).astype(np.float32))
    w = cp.asarray(rng.standard_normal((5, 12, 3, 3)).astype(np.float32))
    x0, w0 = x.copy(), w.copy()
    winograd_conv2d(x, w, 1, splits=2)
    assert bool((x == x0).all()) and bool((w == w0).all())


def test_conv2d_chooses_a_kernel_and_both_agree(rng, monkeypatch, tmp_path):
    import cupy as cp

    from xcorr_app._cuda import tuning
    from xcorr_app.conv import _api as conv
    from xcorr_app.errors import XcorrError

    monkeypatch.setenv("XCORR_CACHE_DIR", str(tmp_path))  # nothing measured yet
    tuning.forget_memory()

    x = rng.standard_normal((4, 32, 20, 18)).astype(np.float32)
    w = rng.standard_normal((24, 32, 3, 3)).astype(np.float32)
    ref = conv2d_reference(x, w, (1, 1), (1, 1))
    xg, wg = cp.asarray(x), cp.asarray(w)
    assert conv.chosen_method(xg, wg, 1, 1) == "auto: not measured yet"
    got = {m: cp.asnumpy(conv.conv2d(xg, wg, padding=1, method=m)) for m in conv.METHODS
           if m not in ("pointwise", "mma")}  # (1x1 kernels)
    assert conv.chosen_method(xg, wg, 1, 1) in ("im2win", "winograd")
    assert all(rel_error(g, ref) <= 1e-5 for g in got.values())
    assert conv.chosen_method(xg, wg, 2, 1) == "im2win"
    with pytest.raises(XcorrError, match="3x3 filters at stride 1"):
        conv.conv2d(xg, wg, stride=2, method="winograd")
