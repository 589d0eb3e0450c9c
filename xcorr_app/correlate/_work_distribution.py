"""Work distribution of the warp-shuffle kernels: the host side and a Python port of the device.

The device code is ``kernels/include/work_distribution.cuh``; read its header for the scheme.  In
short: the output's y-shifts are cut into groups of ``shifts`` consecutive shifts; group ``g`` needs
the left rows of its *domain*; a *task* is up to ``rows_per_worker`` consecutive domain rows;

* ``none``: one worker per group, whole domain, plain stores;
* ``rectangle``: ``max_tasks`` workers per group, idle ones exit at once, atomicAdd;
* ``triangle``: exactly one worker per task, found by solving the quadratic of the cumulative
  task count on a linear piece of the task profile, atomicAdd;
* ``block`` (ours): the ``max_tasks`` warps of one block share each group's rows (warp ``w``
  sums the row slabs ``w``, ``w + max_tasks``, ...) and add their sums in shared memory: one
  plain store per output, no atomics and no zeroed output.  ``max_tasks`` is the task count of
  the longest domain, at most :data:`MAX_BLOCK_WARPS`.

:func:`schedule` computes everything the kernel launch needs; :func:`assign` is the exact port
of the device's ``assign_work`` used by the CPU tests to prove that every (group, row) is
covered exactly once.

Examples
--------
>>> s = schedule("triangle", left_h=4, right_h=4, shift_y0=-3, out_h=7, shifts=1,
...              rows_per_worker=2)
>>> s.n_workers, [assign(s, w) for w in range(4)]
(10, [(0, 0), (1, 0), (2, 0), (2, 1)])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError

DISTRIBUTIONS = ("none", "rectangle", "triangle", "block")
DIST_IDS = {name: i for i, name in enumerate(DISTRIBUTIONS)}  # work_distribution.cuh
PIECE_FIELDS = 5  # g_start, length, alpha, beta, tasks_before
#: warps of one block of the ``block`` distribution (``__launch_bounds__(256)``)
MAX_BLOCK_WARPS = 8


def group_domains(left_h: int, right_h: int, shift_y0: int, out_h: int, shifts: int):
    """``(begin, length)`` arrays of the left-row domain of every shift group."""
    g = np.arange(-(-out_h // shifts), dtype=np.int64)
    ky0 = shift_y0 + g * shifts
    ky_last = np.minimum(ky0 + shifts - 1, shift_y0 + out_h - 1)
    begin = np.maximum(0, ky0)
    end = np.minimum(left_h, ky_last + right_h)
    return begin, np.maximum(0, end - begin)


def profile_pieces(lengths, rows_per_worker: int) -> np.ndarray:
    """The task profile as linear pieces ``(g_start, length, alpha, beta, tasks_before)``.

    Maximal runs of groups whose domain lengths form an arithmetic progression; pieces without
    any task are left out.
    """
    T = np.asarray(lengths, dtype=np.int64)
    pieces, before, g = [], 0, 0
    while g < len(T):
        end = g + 1
        if end < len(T):
            beta = int(T[end] - T[g])
            while end + 1 < len(T) and T[end + 1] - T[end] == beta:
                end += 1
            end += 1
        else:
            beta = 0
        tasks = int(np.sum(-(-T[g:end] // rows_per_worker)))
        if tasks:
            pieces.append((g, end - g, int(T[g]), beta, before))
        before += tasks
        g = end
    return np.array(pieces, dtype=np.int32).reshape(-1, PIECE_FIELDS)


@dataclass(frozen=True)
class Schedule:
    """What one launch of a warp-shuffle kernel needs about its workers."""

    distribution: str
    rows_per_worker: int  # 0 with "none" (the whole domain)
    n_groups: int
    n_workers: int
    max_tasks: int  # "block": the warps of a block
    pieces: np.ndarray  # (n_pieces, PIECE_FIELDS) int32; used by "triangle"
    domain_begin: np.ndarray
    domain_length: np.ndarray

    @property
    def dist_id(self) -> int:
        return DIST_IDS[self.distribution]

    def tasks(self) -> np.ndarray:
        """Tasks of every group."""
        if self.distribution == "none":
            return np.ones_like(self.domain_length)
        return -(-self.domain_length // self.rows_per_worker)


def schedule(distribution: str, left_h: int, right_h: int, shift_y0: int, out_h: int,
             shifts: int, rows_per_worker: int = 0) -> Schedule:
    """Workers and task profile of one problem (rows of one left and one right matrix)."""
    if distribution not in DIST_IDS:
        raise InputError(f"unknown distribution {distribution!r}; use one of {DISTRIBUTIONS}")
    begin, length = group_domains(left_h, right_h, shift_y0, out_h, shifts)
    n_groups = len(length)
    if distribution == "none":
        return Schedule("none", 0, n_groups, n_groups, 1,
                        np.zeros((0, PIECE_FIELDS), np.int32), begin, length)
    if rows_per_worker < 1:
        raise InputError("rows_per_worker must be at least 1 with a rectangle, triangle or "
                         "block distribution")
    tasks = -(-length // rows_per_worker)
    max_tasks = int(tasks.max()) if n_groups else 0
    if distribution == "block":
        warps = min(MAX_BLOCK_WARPS, max(1, max_tasks))
        return Schedule("block", int(rows_per_worker), n_groups, n_groups * warps, warps,
                        np.zeros((0, PIECE_FIELDS), np.int32), begin, length)
    pieces = profile_pieces(length, rows_per_worker)
    n_workers = n_groups * max_tasks if distribution == "rectangle" else int(tasks.sum())
    return Schedule(distribution, int(rows_per_worker), n_groups, n_workers, max_tasks, pieces,
                    begin, length)


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """``sum(floor((a*i + b) / m) for i in range(n))`` for ``a, b >= 0`` (device port)."""
    ans = 0
    while True:
        if a >= m:
            ans += (n - 1) * n // 2 * (a // m)
            a %= m
        if b >= m:
            ans += n * (b // m)
            b %= m
        y_max = a * n + b
        if y_max < m:
            return ans
        n, b = divmod(y_max, m)
        m, a = a, m


def piece_tasks(k: int, alpha: int, beta: int, rpw: int) -> int:
    """Tasks of the first ``k`` groups of a piece (device port)."""
    if k <= 0:
        return 0
    if beta == 0:
        return k * (-(-alpha // rpw))
    if beta > 0:
        return floor_sum(k, rpw, beta, alpha + rpw - 1)
    return floor_sum(k, rpw, -beta, alpha + beta * (k - 1) + rpw - 1)


def assign(s: Schedule, worker: int):
    """``(group, task)`` of ``worker``, or None for an idle one: the device's ``assign_work``
    followed by the kernel's check that the task starts inside the domain.  With ``block``,
    worker ``w`` is warp ``w % max_tasks`` of group ``w // max_tasks`` (its task number)."""
    if s.distribution == "block":
        group, warp = divmod(worker, s.max_tasks)
        return (group, warp) if group < s.n_groups else None
    if s.distribution == "none":
        return (worker, 0) if worker < s.n_groups else None
    if s.distribution == "rectangle":
        group, task = worker % s.n_groups, worker // s.n_groups
        if task >= s.max_tasks or task * s.rows_per_worker >= s.domain_length[group]:
            return None
        return group, task
    rpw, pieces = s.rows_per_worker, s.pieces
    p = len(pieces) - 1
    for i in range(1, len(pieces)):
        if worker < pieces[i, 4]:
            p = i - 1
            break
    g_start, length, alpha, beta, before = (int(v) for v in pieces[p])
    w = worker - before
    f32 = np.float32  # the device computes the guess in float with rsqrtf
    a = f32(beta) / f32(2 * rpw)
    b = f32(alpha) / f32(rpw) + f32(0.5) - a
    disc = max(b * b + f32(4) * a * f32(w), f32(0))
    denom = b + (disc * (f32(1) / np.sqrt(disc)) if disc > 0 else f32(0))
    guess = f32(2) * f32(w) / denom if denom > 0 else f32(0)
    k = int(min(max(guess, f32(0)), f32(length - 1)))
    while k > 0 and piece_tasks(k, alpha, beta, rpw) > w:
        k -= 1
    while k + 1 < length and piece_tasks(k + 1, alpha, beta, rpw) <= w:
        k += 1
    return g_start + k, w - piece_tasks(k, alpha, beta, rpw)


def worker_rows(s: Schedule, group: int, task: int, left_rows: int = 1):
    """Left rows that a worker sums: ``range(begin, end)``, or with ``block`` the slabs of
    ``left_rows`` rows the warp's loop visits (``kernels/correlate/warp_shuffle_xcorr.cu``,
    ``shuffle_rows`` from ``begin + warp * left_rows`` in steps of ``warps * left_rows``)."""
    begin = int(s.domain_begin[group])
    end = begin + int(s.domain_length[group])
    if s.distribution == "block":
        step = s.max_tasks * left_rows
        return [y + i for y in range(begin + task * left_rows, end, step)
                for i in range(left_rows) if y + i < end]
    if s.distribution == "none":
        return range(begin, end)
    start = begin + task * s.rows_per_worker
    return range(start, min(start + s.rows_per_worker, end))
