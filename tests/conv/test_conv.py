"""Multi-channel convolution on the CPU: the pointwise configuration search (valid tilings,
within the limits, covering the output exactly once) and the API's checks."""

import numpy as np
import pytest

from xcorr_app import conv2d, pointwise
from xcorr_app.errors import XcorrError
from xcorr_app._cuda.device import H100_LIMITS, Limits
from xcorr_app.conv._dynamic_blocking import (BLOCK_NUMS, configurations, covered,
                                      fits, plan)
from xcorr_app.conv._reference import conv2d_reference

MOBILENET_V2_POINTWISE = [  # (C_in, C_out, H=W) of MobileNetV2's 1x1 layers
    (32, 16, 112), (16, 96, 112), (96, 24, 56), (24, 144, 56), (144, 24, 56), (144, 32, 28),
    (32, 192, 28), (192, 32, 28), (192, 64, 14), (64, 384, 14), (384, 64, 14), (384, 96, 14),
    (96, 576, 14), (576, 96, 14), (576, 160, 7), (160, 960, 7), (960, 160, 7), (960, 320, 7),
    (320, 1280, 7)]


def test_every_compiled_configuration_is_a_valid_tiling():
    cfgs = configurations()
    assert len(cfgs) == len(set(c.template for c in cfgs)) > 10
    for c in cfgs:
        assert c.thread_f * c.thread_p * 128 == c.block_f * c.block_p * c.c_num
        assert (c.block_f // 2) % c.thread_f == 0 and (c.block_p // 2) % c.thread_p == 0
        assert c.block_k % c.c_num == 0


@pytest.mark.parametrize("limits", [H100_LIMITS, Limits(108, 65536, 167936, 166912),
                                    Limits(80, 65536, 65536, 49152)])
def test_search_respects_the_limits_and_picks_the_layout(rng, limits):
    shapes = [(c_out, c_in, 32 * hw * hw) for c_in, c_out, hw in MOBILENET_V2_POINTWISE]
    shapes += [tuple(int(v) for v in rng.integers(1, 700, 3)) for _ in range(40)]
    for f, c, q in shapes:
        cfg = plan(f, c, q, limits)
        assert any(fits(cfg, b, limits) for b in BLOCK_NUMS)
        assert cfg.layout == (1 if f >= 48 else 2)


@pytest.mark.parametrize("f, q", [(1, 1), (5, 7), (37, 300), (64, 128), (130, 33), (48, 1000)])
def test_chosen_tiling_covers_every_output_once(f, q):
    for cfg in {plan(f, 16, q, H100_LIMITS), *configurations()[:6]}:
        writes = covered(cfg, f, q)
        assert (writes == 1).all(), (cfg, np.unique(writes))


def test_small_problems_get_many_blocks_and_big_ones_big_tiles():
    small = plan(1280, 320, 32 * 49, H100_LIMITS)
    big = plan(256, 256, 128 * 56 * 56, H100_LIMITS)
    assert small.blocks(1280, 32 * 49) >= big.blocks(1280, 32 * 49)
    assert big.block_f * big.block_p >= small.block_f * small.block_p


def test_cpu_path_is_the_reference(rng):
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    got = conv2d(x, w, stride=(2, 1), padding=(1, 0))
    assert got.dtype == np.float32 and got.shape == (2, 4, 5, 10)
    np.testing.assert_allclose(got, conv2d_reference(x, w, (2, 1), (1, 0)), rtol=1e-6)
    mix = pointwise(x, np.array([[0.299, 0.587, 0.114]]))
    np.testing.assert_allclose(mix[:, 0], 0.299 * x[:, 0] + 0.587 * x[:, 1] + 0.114 * x[:, 2],
                               rtol=1e-5, atol=1e-5)


def test_reference_against_a_loop(rng):
    x = rng.standard_normal((1, 2, 6, 7))
    w = rng.standard_normal((3, 2, 3, 4))
    got = conv2d_reference(x, w, stride=2, padding=1)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    for f in range(3):
        for i in range(got.shape[2]):
            for j in range(got.shape[3]):
                want = (xp[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 4] * w[f]).sum()
                assert got[0, f, i, j] == pytest.approx(want)


@pytest.mark.parametrize("args, words", [
    ((np.ones((2, 3, 4)), np.ones((1, 3, 1, 1))), "must be (N, C, H, W)"),
    ((np.ones((1, 3, 4, 4)), np.ones((1, 2, 1, 1))), "2 channels but x has 3"),
    ((np.ones((1, 3, 4, 4)), np.ones((1, 3, 5, 5))), "does not fit"),
    ((np.ones((1, 3, 4, 4)), np.ones((1, 3, 1, 1)), 0), "stride must be"),
    ((np.ones((1, 3, 4, 4)), np.ones((1, 3, 1, 1)), 1, -1), "padding must be"),
])
def test_bad_arguments(args, words):
    with pytest.raises(XcorrError, match=words.replace("(", r"\(").replace(")", r"\)")):
        conv2d(*args)
    with pytest.raises(XcorrError, match="must be"):
        pointwise(np.ones((1, 3, 4, 4)), np.ones((2, 3, 2)))


def _gemm_over_tables(x, w, stride, pad, layout):
    """A NumPy port of the im2win kernel's index arithmetic: column q reads src[col(q) +
    off(k)] (zero where off < 0 or, padded and direct, where pos(k) falls outside the image)."""
    from xcorr_app.conv._im2win import window_offsets

    (n, c, h, wd), (f, _, kh, kw) = x.shape, w.shape
    (sy, sx), (py, px) = stride, pad
    ho, wo = (h + 2 * py - kh) // sy + 1, (wd + 2 * px - kw) // sx + 1
    nn, hh, ww = (a.ravel() for a in np.meshgrid(np.arange(n), np.arange(ho), np.arange(wo),
                                                  indexing="ij"))
    if layout == "direct":
        src = x.ravel()
        off, pos = window_offsets(c, kh, kw, h * wd, wd, 1)
        col = nn * c * h * wd + hh * sy * wd + ww * sx - py * wd - px
    else:  # the im2win tensor by its definition
        wp = wd + 2 * px
        xp = np.pad(x, ((0, 0), (0, 0), (py, py + sy * ho + kh), (px, px)))
        win = np.empty((n, c, ho, wp, kh))
        for i in range(kh):
            win[..., i] = xp[:, :, i:i + sy * ho:sy, :][:, :, :ho]
        src = win.ravel()
        off, pos = window_offsets(c, kh, kw, ho * wp * kh, 1, kh)
        col = nn * c * ho * wp * kh + hh * wp * kh + ww * sx * kh
    k = c * kh * kw
    off, pos = off.astype(np.int64), pos.astype(np.int64)
    idx = col[:, None] + off[None, :k]
    ok = off[None, :k] >= 0
    if layout == "direct":
        r = (hh * sy - py)[:, None] + (pos[None, :k] >> 16)
        s = (ww * sx - px)[:, None] + (pos[None, :k] & 0xFFFF)
        ok = ok & (r >= 0) & (r < h) & (s >= 0) & (s < wd)
    b = np.where(ok, src[np.where(ok, idx, 0)], 0.0)           # (q, k)
    out = w.reshape(f, k) @ b.T                                   # (f, q)
    return out.reshape(f, n, ho, wo).transpose(1, 0, 2, 3)


@pytest.mark.parametrize("layout", ["direct", "im2win"])
def test_kernel_index_arithmetic_is_the_convolution(rng, layout):
    """The tables and column offsets the GPU kernel uses, ported to NumPy, give the reference
    on random odd shapes, strides and paddings (the GPU tests check the kernel itself)."""
    for _ in range(12):
        n, c, f = rng.integers(1, 4), rng.integers(1, 5), rng.integers(1, 4)
        kh, kw = rng.integers(1, 6, size=2)
        sy, sx = rng.integers(1, 4, size=2)
        py, px = rng.integers(0, 3, size=2)
        h, wd = kh + rng.integers(0, 9), kw + rng.integers(0, 9)
        x = rng.standard_normal((n, c, h, wd))
        w = rng.standard_normal((f, c, kh, kw))
        got = _gemm_over_tables(x, w, (sy, sx), (py, px), layout)
        np.testing.assert_allclose(got, conv2d_reference(x, w, (sy, sx), (py, px)),
                                   rtol=1e-10, atol=1e-10)


def test_split_steps_fill_two_waves_with_long_enough_splits():
    from xcorr_app.conv._im2win import MAX_SPLITS, MIN_SPLIT_STEPS, split_steps

    rng = np.random.default_rng(5)
    for _ in range(500):
        blocks, steps, resident = (int(v) for v in rng.integers(1, 3000, size=3))
        per = split_steps(blocks, steps, resident)
        splits = -(-steps // per)
        assert 1 <= per <= steps and splits <= MAX_SPLITS
        if splits > 1:
            assert per >= MIN_SPLIT_STEPS and blocks < 2 * resident
            assert blocks * (splits - 1) < 2 * resident  # no more splits than two waves need
        elif blocks < 2 * resident:
            assert steps < 2 * MIN_SPLIT_STEPS


def test_window_tables_refuse_what_the_kernel_cannot_index():
    from xcorr_app.conv._im2win import window_offsets

    with pytest.raises(XcorrError, match="too large"):
        window_offsets(1, 1, 2**15, 1, 1, 1)
    with pytest.raises(XcorrError, match="at most 2\\*\\*31"):
        window_offsets(2, 1, 1, 2**31, 1, 1)


def _winograd_port(x, w, pad):
    """The kernel's algorithm in NumPy (float64): tiles p = (n, ty, tx) of 2x2 outputs, each
    from the 4x4 patch at (2 ty - PY, 2 tx - PX) (zero outside the image), transformed by the
    module's matrices, summed over channels per element, transformed back, cut to the output."""
    from xcorr_app.conv._winograd import AT, BT, G, winograd_tiles

    (n, c, h, wd), f = x.shape, w.shape[0]
    py, px = pad
    ho, wo = h + 2 * py - 2, wd + 2 * px - 2
    ty, tx = winograd_tiles(ho, wo)
    padded = np.zeros((n, c, 2 * ty + 2, 2 * tx + 2))
    rows, cols = min(h, 2 * ty + 2 - py), min(wd, 2 * tx + 2 - px)
    padded[:, :, py:py + rows, px:px + cols] = x[:, :, :rows, :cols]
    u = np.einsum("ea,fcab,gb->fceg", G, w, G)  # (F, C, 4, 4)
    out = np.zeros((n, f, 2 * ty, 2 * tx))
    for i in range(ty):
        for j in range(tx):
            d = padded[:, :, 2 * i:2 * i + 4, 2 * j:2 * j + 4]
            v = np.einsum("ea,ncab,gb->nceg", BT, d, BT)
            m = np.einsum("fceg,nceg->nfeg", u, v)
            out[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2] = np.einsum("ye,nfeg,xg->nfyx", AT, m, AT)
    return out[:, :, :ho, :wo]


@pytest.mark.parametrize("pad", [(0, 0), (1, 1), (2, 0), (0, 3)])
def test_winograd_port_equals_the_reference(rng, pad):
    for _ in range(3):
        n, c, f = (int(v) for v in rng.integers(1, 5, 3))
        h, w = (int(v) for v in rng.integers(max(1, 3 - 2 * max(pad)), 12, 2))
        if h + 2 * pad[0] < 3 or w + 2 * pad[1] < 3:
            continue
        x = rng.standard_normal((n, c, h, w))
        wt = rng.standard_normal((f, c, 3, 3))
        got = _winograd_port(x, wt, pad)
        assert np.abs(got - conv2d_reference(x, wt, (1, 1), pad)).max() < 1e-10


def test_winograd_port_fails_with_a_wrong_matrix(rng):
    from xcorr_app.conv import _winograd as gpu_winograd

    x, wt = rng.standard_normal((1, 2, 7, 6)), rng.standard_normal((3, 2, 3, 3))
    good = gpu_winograd.BT.copy()
    try:
        gpu_winograd.BT[2] = [0, 1, 1, 0]  # row 1 twice
        assert np.abs(_winograd_port(x, wt, (1, 1)) -
                      conv2d_reference(x, wt, (1, 1), (1, 1))).max() > 1e-3
    finally:
        gpu_winograd.BT[:] = good


def test_winograd_applicability_and_method_errors():
    from xcorr_app.conv import chosen_method
    from xcorr_app.conv._winograd import (WINOGRAD_TILES, applicable, shared_bytes, tile_threads,
                                        unsupported)

    assert applicable((2, 3, 5, 5), (4, 3, 3, 3), (1, 1), (0, 0))
    assert not applicable((2, 3, 5, 5), (4, 3, 5, 5), (1, 1), (0, 0))
    assert not applicable((2, 3, 5, 5), (4, 3, 3, 3), (1, 2), (0, 0))
    assert not applicable((2, 3, 2, 5), (4, 3, 3, 3), (1, 1), (0, 0))  # no output
    assert "channels" in unsupported((2, 3, 5, 5), (4, 2, 3, 3), (1, 1), (0, 0))
    assert "32-bit" in unsupported((2, 3, 5, 5), (2**21, 3, 3, 3), (1, 1), (0, 0))
    for t in WINOGRAD_TILES:  # launchable on sm_90: threads and opt-in shared memory
        assert tile_threads(t) <= 1024 and shared_bytes(t) <= 227 * 1024
    x, w = np.ones((1, 2, 6, 6), np.float32), np.ones((1, 2, 5, 5), np.float32)
    with pytest.raises(XcorrError, match="method must be one of"):
        conv2d(x, w, method="fft")
    with pytest.raises(XcorrError, match="3x3 filters at stride 1"):
        conv2d(x, w, method="winograd")
    with pytest.raises(XcorrError, match="1x1 filters at stride 1 without padding"):
        conv2d(x, w, method="pointwise")
    with pytest.raises(XcorrError, match="1x1 filters at stride 1 without padding"):
        conv2d(x, w[:, :, :1, :1], padding=1, method="pointwise")
    with pytest.raises(XcorrError, match="'mma' computes 1x1 filters at stride 1"):
        conv2d(x, w[:, :, :1, :1], stride=2, method="mma")
    assert conv2d(x, w[:, :, :1, :1], method="pointwise").shape == (1, 1, 6, 6)
    assert conv2d(x, w[:, :, :1, :1], method="mma").shape == (1, 1, 6, 6)  # (the reference)
    assert conv2d(x, w[:, :, :3, :3], method="winograd").shape == (1, 1, 4, 4)
    assert chosen_method(x, w[:, :, :3, :3]) == "reference"  # NumPy in: no GPU needed
