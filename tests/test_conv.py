"""Multi-channel convolution on the CPU: the pointwise configuration search (valid tilings,
within the limits, covering the output exactly once) and the API's checks."""

import numpy as np
import pytest

from xcorr_app import conv2d, pointwise
from xcorr_app.errors import XcorrError
from xcorr_app.pointwise_plan import (BLOCK_NUMS, H100_LIMITS, Limits, configurations, covered,
                                      fits, plan)
from xcorr_app.reference import conv2d_reference

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
