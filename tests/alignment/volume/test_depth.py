"""zlocate on frames cut from a z-stack built from real images: known subplane depths, xy
offsets and Poisson noise."""

import numpy as np
import pytest

from xcorr_app.alignment.volume import zlocate
from xcorr_app.errors import InputError

from volume_samples import depth_movie


@pytest.mark.parametrize("names, subplane", [
    (("camera", "coins", "moon", "astronaut"), "projection"),
    (("brick", "moon", "coins", "camera"), "projection"),
    (("camera", "coins", "moon", "astronaut"), "parabola")])
def test_depth_trajectory(names, subplane):
    n = 24
    t = np.arange(n)
    depths = 11.5 + 6.0 * np.sin(2 * np.pi * t / n) + 0.37 * np.cos(t)  # a drift with jitter
    rng = np.random.default_rng(2)
    offsets = rng.integers(-3, 4, (n, 2))
    frames, zstack = depth_movie(names, depths, offsets, photons=100.0)
    result = zlocate(frames, zstack, max_shift=5, subplane=subplane, device="cpu")
    error = result.depth - depths
    assert np.sqrt((error ** 2).mean()) <= 0.2, error
    np.testing.assert_allclose(result.shifts, offsets, atol=0.25)  # back onto the z-stack
    assert not result.at_edge.any() and (result.score > 0.3).all()  # (dim planes: noisy)
    assert len(result.to_csv().splitlines()) == n + 1


def test_edges_and_chunks():
    frames, zstack = depth_movie(("camera", "coins", "moon"), [0.0, 5.0, 11.0], [(0, 0)] * 3,
                                 photons=1e4, depth=12, size=32)
    whole = zlocate(frames, zstack, device="cpu")
    chunked = zlocate(frames, zstack, device="cpu", memory_limit=30 * 12 * 32 * 32)
    assert "1 frame(s) per chunk" in chunked.notes[0]
    np.testing.assert_allclose(chunked.depth, whole.depth, atol=1e-9)
    assert whole.at_edge.tolist() == [True, False, True]
    assert whole.plane.tolist() == [0, 5, 11]
    assert any("first or last plane" in n for n in whole.notes)


@pytest.mark.parametrize("kwargs, message", [
    ({"movie": np.ones((2, 8, 9))}, "same size"),
    ({"zstack": np.ones((3, 3, 8, 8))}, r"expected \(Z, Y, X\)"),
    ({"max_shift": (1, 2, 3)}, r"two \(dy, dx\)"),
    ({"upsample": "x"}, "a number from 1 to 100"),
    ({"subplane": "spline"}, "unknown subplane"),
    ({"zstack": np.ones((1, 8, 8))}, "a depth needs 2 or more"),
    ({"memory_limit": 10}, "MiB allowed"),
])
def test_bad_inputs(kwargs, message):
    args = {"movie": np.ones((2, 8, 8)), "zstack": np.ones((3, 8, 8)), "device": "cpu",
            **kwargs}
    with pytest.raises(InputError, match=message):
        zlocate(**args)
