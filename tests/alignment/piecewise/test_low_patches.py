"""The patch pass's rule for untrusted patches (``alignment/piecewise/_low_patches.py``): the kernel's
sorting network and median on the CPU (a model of its selection), the kernel against the NumPy
rule (GPU, marked ``gpu``: every output compared exactly, poisoned first), and the patch pass
taking the device's path."""

import itertools
import re

import numpy as np
import pytest

from xcorr_app import align
from xcorr_app.alignment.piecewise import _low_patches, _patch_pass, _patch_rows
from xcorr_app.alignment.piecewise._low_patches import fill_low, low_patches
from xcorr_app._cuda.loader import source_path
from xcorr_app.bench._align_data import nonrigid_stack
from xcorr_app.errors import InputError

SOURCE = source_path("patch_field.cu")


def _network():
    text = SOURCE.read_text()
    body = re.search(r"#define FILL_NETWORK\(X\)(.*?)\n\n", text, re.S).group(1)
    return [tuple(map(int, p)) for p in re.findall(r"X\((\d), (\d)\)", body)]


def _median8(values):
    """The kernel's median8, step by step: the network with NaN last, then the two picks."""
    v = list(values)
    for i, j in _network():
        a, b = v[i], v[j]
        if (np.isnan(a) and not np.isnan(b)) or (not np.isnan(a) and not np.isnan(b) and a > b):
            v[i], v[j] = b, a
    k = sum(not np.isnan(x) for x in v)
    lo, hi = v[max(k - 1, 0) // 2], v[k // 2]
    return (lo + hi) * 0.5


def test_the_kernels_network_sorts_every_input():
    pairs = _network()
    assert len(pairs) == 19
    for bits in itertools.product((0, 1), repeat=8):  # the 0-1 principle
        v = list(bits)
        for i, j in pairs:
            if v[i] > v[j]:
                v[i], v[j] = v[j], v[i]
        assert v == sorted(v), bits


def test_the_kernels_median_is_nanmedian():
    rng = np.random.default_rng(7)
    for _ in range(2000):
        v = rng.choice([-1.5, 0.0, 2.0, 3.25], 8) if rng.random() < 0.3 else rng.normal(size=8)
        v[rng.random(8) < rng.random()] = np.nan
        got = _median8(v)
        if np.isnan(v).all():
            assert np.isnan(got)
        else:
            assert got == np.nanmedian(v), v


def _case(rng, n, gy, gx, min_confidence):
    p = gy * gx
    d = rng.normal(0, 1.5, (n, p, 2))
    peak = rng.uniform(0.2, 1.0, (p, n))
    conf = rng.uniform(0.5, 3.0, (p, n))
    border = rng.random((p, n)) < 0.1
    d[rng.random((n, p)) < 0.05, rng.integers(0, 2)] = np.nan
    d[rng.random((n, p)) < 0.02, 0] = np.inf
    peak[rng.random((p, n)) < 0.03] = np.nan
    conf[:, 0] = 0.5  # frame 0: no good patch (all take 0)
    conf[:, 1] = np.where(np.arange(p) == p // 2, 2.0, 0.5)  # frame 1: one good patch
    return d, peak, conf, border


@pytest.mark.gpu
@pytest.mark.parametrize("grid", [(1, 1), (3, 5), (4, 4), (7, 3), (32, 32)])
@pytest.mark.parametrize("min_confidence", [None, 1.7])
def test_gpu_rule_equals_numpys(grid, min_confidence):
    import cupy as cp

    rng = np.random.default_rng(sum(grid))
    n = 37
    d, peak, conf, border = _case(rng, n, *grid, min_confidence)
    low = low_patches(d, peak.T, conf.T, border.T, min_confidence)
    filled = fill_low(d, low, grid)
    rows = np.concatenate([filled, peak.T[..., None], np.where(border.T, 0.0, conf.T)[..., None],
                           low[..., None].astype(np.float64)], axis=-1)
    scores = tuple(cp.asarray(a) for a in (peak, conf, border))
    g_low = cp.asarray(rng.random(low.shape) < 0.5)  # poisoned: decided by the kernel
    got, g_rows = _low_patches.fill_low_gpu(cp.asarray(d), grid, g_low, scores,
                                            min_confidence, decide=True, rows=True)
    np.testing.assert_array_equal(g_low.get(), low)
    np.testing.assert_array_equal(got.get(), filled)
    np.testing.assert_array_equal(g_rows.get(), rows)
    assert (filled[0] == 0).all() and np.isfinite(filled[1]).all()
    # the rows into a given array (a slice of a larger table, poisoned), the same numbers
    table = cp.full((n + 3, *rows.shape[1:]), cp.nan)
    into = table[2:2 + n]
    got2, g_rows2 = _low_patches.fill_low_gpu(cp.asarray(d), grid, g_low, scores,
                                              min_confidence, decide=True, rows=into)
    assert g_rows2 is into and bool(cp.isnan(table[:2]).all() & cp.isnan(table[-1]).all())
    np.testing.assert_array_equal(into.get(), rows)
    np.testing.assert_array_equal(got2.get(), filled)
    with pytest.raises(InputError, match="rows to write into"):
        _low_patches.fill_low_gpu(cp.asarray(d), grid, g_low, scores, rows=table[:n, :, :4])
    # with a base (the frames' rigid shifts, NaN for a frame not measured): the rows hold the
    # field, base plus the filled deviation; the filled deviation itself unchanged
    base = rng.normal(0, 5, (n, 2))
    base[3] = np.nan
    got3, g_rows3 = _low_patches.fill_low_gpu(cp.asarray(d), grid, g_low, scores,
                                              min_confidence, rows=True, base=cp.asarray(base))
    field = rows.copy()
    field[..., :2] += base[:, None, :]
    np.testing.assert_array_equal(g_rows3.get(), field)
    np.testing.assert_array_equal(got3.get(), filled)
    with pytest.raises(InputError, match="base"):
        _low_patches.fill_low_gpu(cp.asarray(d), grid, g_low, scores, rows=True,
                                  base=cp.asarray(base[:-1]))
    # later passes: low as given, no rows
    d2 = d + rng.normal(0, 0.1, d.shape)
    again, none = _low_patches.fill_low_gpu(cp.asarray(d2), grid, g_low)
    assert none is None
    np.testing.assert_array_equal(again.get(), fill_low(d2, low, grid))


@pytest.mark.gpu
def test_gpu_rule_refuses_what_it_cannot_take():
    import cupy as cp

    d = cp.zeros((2, 6, 2))
    low = cp.zeros((2, 6), bool)
    scores = (cp.zeros((6, 2)), cp.zeros((6, 2)), cp.zeros((6, 2), bool))
    assert _low_patches.fill_low_fits(d, (2, 3), low, scores)
    assert not _low_patches.fill_low_fits(d, (3, 3), low, scores)  # not the grid's patches
    assert not _low_patches.fill_low_fits(d.astype(cp.float32), (2, 3), low, scores)
    assert not _low_patches.fill_low_fits(d, (2, 3), low, tuple(a.T for a in scores))
    big = cp.zeros((1, 33 * 32, 2))
    assert not _low_patches.fill_low_fits(big, (33, 32), cp.zeros((1, 33 * 32), bool))
    with pytest.raises(InputError):
        _low_patches.fill_low_gpu(d, (2, 3), low, decide=True)  # deciding needs the scores
    with pytest.raises(InputError):
        _low_patches.fill_low_gpu(big, (33, 32), cp.zeros((1, 33 * 32), bool))


@pytest.mark.gpu
@pytest.mark.parametrize("flat", [False, True])
def test_gpu_patch_pass_takes_the_device_path_and_gives_the_hosts_rows(monkeypatch, flat):
    """The patch pass on the GPU queues its chunks without waiting (the rule on the device):
    the same motion field as with the rule on the host, up to the GPU's run-to-run spread
    (atomicAdd sums: about 1e-5 px).  ``flat``: a corner of four frames made constant, so
    that their patches there have no peak and take their neighbours' (on the CPU: 9 of 90)."""
    import cupy as cp

    stack, _ = nonrigid_stack(np.random.default_rng(3), n=10, shape=(160, 176))
    if flat:
        stack = stack.copy()
        stack[3:7, :70, :75] = 700
    kw = dict(device="gpu", patches=(3, 3), max_shift=14, max_deviation=4, chunk_frames=4,
              verify=False)
    host_rule = []
    on_host = _patch_pass._measured_on_host

    def counted(*args, **kwargs):
        host_rule.append(1)
        return on_host(*args, **kwargs)

    monkeypatch.setattr(_patch_pass, "_measured_on_host", counted)
    device = align(cp.asarray(stack), **kw)
    assert host_rule == []
    monkeypatch.setattr(_patch_pass, "fill_low_fits", lambda *a, **k: False)
    host = align(cp.asarray(stack), **kw)
    assert len(host_rule) == 3  # its three chunks
    np.testing.assert_allclose(device.motion_field, host.motion_field, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(device.patch_low, host.patch_low)
    np.testing.assert_allclose(device.patch_confidence, host.patch_confidence, rtol=1e-4)
    assert device.patch_low.any() == flat  # (flat: the rule had patches to fill)


@pytest.mark.gpu
def test_gpu_rows_fetched_as_the_pass_goes_equal_those_fetched_at_its_end(monkeypatch):
    """The rows kept on the device go to the host as each chunk's are written (a page-locked
    table: no fetch at the end), or in one copy at the end of the pass (a pageable one), or
    once they pass ``KEPT_MAX_BYTES`` (a long run's device memory stays bounded): with a bound
    of one byte, a chunk's rows are fetched as the next chunk's are made; the same field."""
    import cupy as cp

    stack, _ = nonrigid_stack(np.random.default_rng(4), n=11, shape=(160, 176))
    kw = dict(device="gpu", patches=(3, 3), max_shift=14, max_deviation=4, chunk_frames=4,
              verify=False)
    fetched = []
    real = _patch_rows.backend

    class Counting:  # the module's backend, its fetches of row blocks (n, P, 5) counted
        def __getattr__(self, name):
            return getattr(real, name)

        def to_numpy(self, a, out=None):
            if a.ndim == 3 and a.shape[-1] == 5:
                fetched.append(len(a))
            return real.to_numpy(a, out=out)

    chunks = _patch_pass.map_chunks

    def marked(*a, **k):  # each chunk handed back by the chunk loop: "c"
        for item in chunks(*a, **k):
            fetched.append("c")
            yield item

    monkeypatch.setattr(_patch_rows, "backend", Counting())
    monkeypatch.setattr(_patch_pass, "map_chunks", marked)
    pinned = align(cp.asarray(stack), **kw)
    assert fetched[-3:] == ["c", "c", "c"] and 11 not in fetched  # (copied as they went)
    fetched.clear()
    def for_range(cls, xp, shape):  # a pageable host table: the rows fetched at the end
        return cls(xp, np.empty(shape), False)

    monkeypatch.setattr(_patch_rows.KeptRows, "for_range", classmethod(for_range))
    at_end = align(cp.asarray(stack), **kw)
    # (the tails: a template made from the stack first would add its own chunks)
    assert fetched[-4:] == ["c", "c", "c", 11] and fetched.count(11) == 1
    # (a GPU run repeats to about 1e-5 px: the correlation kernels add with atomics)
    np.testing.assert_allclose(pinned.motion_field, at_end.motion_field, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(pinned.patch_low, at_end.patch_low)
    fetched.clear()
    monkeypatch.setattr(_patch_rows, "KEPT_MAX_BYTES", 1)
    as_it_goes = align(cp.asarray(stack), **kw)
    assert fetched[-6:] == ["c", 4, "c", 4, "c", 3] and fetched.count(4) == 2
    np.testing.assert_allclose(as_it_goes.motion_field, at_end.motion_field, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(as_it_goes.patch_low, at_end.patch_low)
