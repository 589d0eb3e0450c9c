"""The chunk arithmetic of every streamed loop: which frames each chunk and each GPU gets.

Examples
--------
>>> chunk_bounds(0, 10, 4)
[(0, 4), (4, 8), (8, 10)]
>>> chunk_bounds(3, 9, 4)
[(3, 7), (7, 9)]
>>> frame_ranges(10, 3)
[(0, 3), (3, 6), (6, 10)]
>>> frame_ranges(2, 4)
[(0, 1), (1, 2)]
"""

from __future__ import annotations

import numbers

from ..errors import InputError


def chunk_bounds(start: int, stop: int, chunk_frames: int) -> list[tuple[int, int]]:
    """``(a, b)`` of the chunks of frames ``start:stop``, ``chunk_frames`` each (the last may
    be shorter)."""
    whole = isinstance(chunk_frames, numbers.Integral) and not isinstance(chunk_frames, bool)
    if not whole or chunk_frames < 1:  # (int() took 2.5 as 2 and True as 1)
        raise InputError(f"chunk_frames must be a whole number >= 1, got {chunk_frames!r}")
    step = int(chunk_frames)
    return [(a, min(a + step, stop)) for a in range(start, stop, step)]


def piece_bounds(n_frames: int, chunk_frames: int, piece_frames: int,
                 first_frames: int | None = None) -> list[tuple[int, int]]:
    """``(a, b)`` of pieces of at most ``piece_frames`` frames that tile the chunks of
    ``0:n_frames`` (:func:`chunk_bounds`): no piece straddles two chunks.  ``first_frames``:
    the first piece at most that many frames (the rest of its chunk in pieces as the others).

    Examples
    --------
    >>> piece_bounds(7, 3, 2)
    [(0, 2), (2, 3), (3, 5), (5, 6), (6, 7)]
    >>> piece_bounds(7, 5, 4, first_frames=1)
    [(0, 1), (1, 5), (5, 7)]
    """
    out = []
    for a, b in chunk_bounds(0, n_frames, chunk_frames):
        if not out and first_frames is not None and b - a > first_frames >= 1:
            out.append((a, a + int(first_frames)))
            a += int(first_frames)
        out += chunk_bounds(a, b, min(int(piece_frames), int(chunk_frames)))
    return out


def frame_ranges(n_frames: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering ``0:n_frames`` whose sizes differ by at most one
    (fewer when there are fewer frames)."""
    parts = max(1, min(int(parts), int(n_frames)))
    bounds = [n_frames * k // parts for k in range(parts + 1)]
    return list(zip(bounds[:-1], bounds[1:]))
