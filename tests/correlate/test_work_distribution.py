"""Worker-to-task mapping of the rectangle, triangle and block distributions (CPU port of the device
arithmetic in kernels/include/work_distribution.cuh; the GPU tests check the kernels themselves)."""

import numpy as np
import pytest

from xcorr_app.correlate._work_distribution import (DISTRIBUTIONS, MAX_BLOCK_WARPS, assign, floor_sum,
                                         profile_pieces, schedule, worker_rows)


def covered(s, left_rows=1):
    """{(group, row): worker} of every row summed, failing on a row summed twice."""
    seen = {}
    for w in range(s.n_workers):
        got = assign(s, w)
        if got is None:
            continue
        g, t = got
        rows = worker_rows(s, g, t, left_rows)
        assert 0 <= g < s.n_groups
        assert len(rows) or s.distribution in ("none", "block")
        for row in rows:
            assert (g, row) not in seen, f"row {row} of group {g} summed by {seen[(g, row)]} and {w}"
            seen[(g, row)] = w
    return seen


def every_row(s):
    return {(g, r) for g in range(s.n_groups)
            for r in range(s.domain_begin[g], s.domain_begin[g] + s.domain_length[g])}


def random_problem(rng):
    lh, rh = (int(v) for v in rng.integers(1, 80, 2))
    shifts = int(rng.choice([1, 2, 4, 8]))
    if rng.random() < 0.5:  # full range
        return lh, rh, -(rh - 1), lh + rh - 1, shifts
    sy = int(rng.integers(0, 90))  # bounded, possibly past the images
    return lh, rh, -sy, 2 * sy + 1, shifts


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_every_shift_row_exactly_once(rng, distribution):
    for _ in range(400):
        lh, rh, y0, oh, shifts = random_problem(rng)
        rpw = int(rng.integers(1, 24))
        left_rows = int(rng.choice([1, 2]))  # the kernel's LEFT_ROWS slabs (block only)
        s = schedule(distribution, lh, rh, y0, oh, shifts, rpw)
        assert set(covered(s, left_rows)) == every_row(s)
        if distribution == "triangle":  # exactly one worker per task
            assert s.n_workers == int(s.tasks().sum())
            assert all(assign(s, w) is not None for w in range(s.n_workers))
        if distribution == "rectangle":
            assert s.n_workers == s.n_groups * s.max_tasks
        if distribution == "block":  # a block of warps per group, each within its task size
            longest = int(s.domain_length.max()) if s.n_groups else 0
            assert s.n_workers == s.n_groups * s.max_tasks
            assert s.max_tasks == min(MAX_BLOCK_WARPS, max(1, -(-longest // rpw)))
            if -(-longest // rpw) <= MAX_BLOCK_WARPS:
                assert all(len(worker_rows(s, g, t)) <= rpw for g, t in
                           (assign(s, w) for w in range(s.n_workers)))


def test_domains_are_the_rows_each_shift_needs(rng):
    """A group's domain is exactly the left rows that overlap the right one at its shifts."""
    for _ in range(200):
        lh, rh, y0, oh, shifts = random_problem(rng)
        s = schedule("none", lh, rh, y0, oh, shifts)
        for g in range(s.n_groups):
            ks = [k for k in range(y0 + g * shifts, y0 + (g + 1) * shifts) if k < y0 + oh]
            need = {y for k in ks for y in range(lh) if 0 <= y - k < rh}
            dom = set(range(s.domain_begin[g], s.domain_begin[g] + s.domain_length[g]))
            assert dom == need


def test_thesis_figure_4x4_one_and_two_rows():
    """4x4 inputs, full range: 7 shifts with 1,2,3,4,3,2,1 overlapping rows."""
    one = schedule("triangle", 4, 4, -3, 7, 1, 1)
    assert list(one.tasks()) == [1, 2, 3, 4, 3, 2, 1] and one.n_workers == 16
    two = schedule("triangle", 4, 4, -3, 7, 1, 2)
    assert list(two.tasks()) == [1, 1, 2, 2, 2, 1, 1] and two.n_workers == 10
    rect = schedule("rectangle", 4, 4, -3, 7, 1, 2)
    assert rect.n_workers == 14 and sum(assign(rect, w) is not None for w in range(14)) == 10


def test_floor_sum_and_pieces(rng):
    for _ in range(300):
        n, m, a, b = (int(v) for v in rng.integers(1, 50, 4))
        assert floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))
    T = np.array([1, 2, 3, 4, 4, 4, 3, 2, 1])
    pieces = profile_pieces(T, 2)
    assert pieces[:, 1].sum() == len(T)  # every group in exactly one piece
    for g0, length, alpha, beta, _ in pieces:
        assert list(T[g0:g0 + length]) == [alpha + beta * i for i in range(length)]
    assert list(pieces[:, 4]) == list(np.cumsum([0] + [int(np.sum(-(-T[g:g + n] // 2)))
                                                       for g, n, *_ in pieces])[:-1])


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown distribution"):
        schedule("square", 4, 4, -3, 7, 1, 1)
    with pytest.raises(ValueError, match="rows_per_worker"):
        schedule("triangle", 4, 4, -3, 7, 1, 0)
