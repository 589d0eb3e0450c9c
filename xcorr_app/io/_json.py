"""Numbers as standard JSON writes them: ``shifts.json`` and the other JSON outputs hold no
bare ``NaN`` or ``Infinity`` (which ``json.dumps`` writes by default and strict readers refuse).
"""

from __future__ import annotations

import numpy as np

__all__ = ["json_number", "strict_json"]


def json_number(v):
    """A number for ``shifts.json``: NaN (nothing measured) -> ``None`` (``null``), and
    infinity (a confidence with no second peak) -> the string ``"inf"`` (``"-inf"``), as
    ``shifts.csv`` writes it; standard JSON has no infinity.

    >>> json_number(2.5), json_number(float("nan")), json_number(float("inf"))
    (2.5, None, 'inf')
    """
    v = float(v)
    if np.isnan(v):
        return None
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def strict_json(obj):
    """``obj`` with every float made standard JSON by :func:`json_number` (dicts, lists and
    tuples walked), so that ``json.dumps(..., allow_nan=False)`` never writes a bare ``NaN``
    (``agreement`` with ``--no-verify``, for one).

    >>> strict_json({"a": [1.0, float("nan")], "b": (float("inf"),), "c": "x"})
    {'a': [1.0, None], 'b': ['inf'], 'c': 'x'}
    """
    if isinstance(obj, dict):
        return {k: strict_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict_json(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return json_number(obj)
    return obj
