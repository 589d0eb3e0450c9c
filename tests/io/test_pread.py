"""``io._pread``: which index of an array is one run of its bytes, and positioned reads."""

import itertools

import numpy as np
import pytest

from xcorr_app.io import PreadFile
from xcorr_app.io._pread import element_run


def _keys(shape):
    """Every key of ints and step-1 slices over a small shape (and negative ints)."""
    per_axis = []
    for n in shape:
        per_axis.append([0, n - 1, -1] + [slice(a, b) for a in range(n + 1)
                                          for b in range(a, n + 1)])
    return itertools.product(*per_axis)


@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4), (1, 2, 1, 3)])
def test_a_run_is_exactly_the_elements_the_key_takes(shape):
    """Against NumPy on every key: a run names the selected elements in order; None only
    where they are not one run."""
    flat = np.arange(np.prod(shape))
    array = flat.reshape(shape)
    seen = {True: 0, False: 0}
    for key in _keys(shape):
        taken = array[key].ravel()
        run = element_run(shape, key)
        contiguous = taken.size == 0 or np.array_equal(taken, np.arange(taken[0],
                                                                        taken[0] + taken.size))
        assert (run is not None) == contiguous, key
        if run is not None and taken.size:
            np.testing.assert_array_equal(flat[run[0]:run[0] + run[1]], taken)
        seen[run is not None] += 1
    assert seen[True] and seen[False]


def test_steps_and_a_short_key_are_no_run():
    assert element_run((4, 5), (slice(0, 4, 2), slice(None))) is None
    assert element_run((4, 5), (slice(None),)) is None


def test_read_into_stops_at_the_end_of_the_file(tmp_path):
    path = tmp_path / "b.bin"
    np.arange(10, dtype=np.uint16).tofile(path)
    f = PreadFile.open(path)
    out = np.full(6, 99, np.uint16)
    assert f.read_into(out, 12) == 8  # 4 of 6 elements left in the file
    assert out.tolist() == [6, 7, 8, 9, 99, 99]
    f.close()
    f.close()  # (once)


def _stored(tmp_path, array, slabs, order):
    """``array`` written as ``slabs`` slabs in the file in ``order``, with gaps between."""
    from xcorr_app.io._pread import StoredArray

    parts = array.reshape(slabs, -1)
    offsets = np.empty(slabs, np.int64)
    with open(tmp_path / "s.bin", "wb") as f:
        for s in order:
            f.write(b"\xee" * 24)  # (what lies between: an index node, another dataset)
            offsets[s] = f.tell()
            f.write(parts[s].tobytes())
    return StoredArray(PreadFile.open(tmp_path / "s.bin"), array.dtype, array.shape, offsets)


@pytest.mark.parametrize("slabs", [1, 4, 12])
def test_a_stored_array_reads_every_key_as_numpy(tmp_path, slabs):
    """Slabs anywhere in the file, in or out of order: every key of ints and slices reads
    the elements NumPy's indexing gives (runs across slabs, picks within frames)."""
    array = np.arange(4 * 3 * 5, dtype=np.uint16).reshape(4, 3, 5) * 7
    order = np.random.default_rng(slabs).permutation(slabs)
    stored = _stored(tmp_path, array, slabs, order)
    for key in _keys(array.shape):
        want = array[key]
        out = np.full(want.shape, 0xFFFF, np.uint16)
        assert stored.read(out, key)
        np.testing.assert_array_equal(out, want)
    assert not stored.read(out, (slice(0, 4, 2), 0, 0))  # (a step: not this reader's)
    stored.close()


def test_a_stored_array_cut_short_is_an_eof(tmp_path):
    array = np.arange(40, dtype=np.float32).reshape(4, 10)
    stored = _stored(tmp_path, array, 4, [0, 1, 2, 3])
    with open(tmp_path / "s.bin", "r+b") as f:
        f.truncate(f.seek(0, 2) - 8)
    out = np.empty((3, 10), np.float32)
    assert stored.read(out, (slice(0, 3), slice(None)))
    np.testing.assert_array_equal(out, array[:3])
    with pytest.raises(EOFError):
        stored.read(out, (slice(1, 4), slice(None)))
    stored.close()
