"""Numbers as standard JSON writes them, and documents written fast: ``shifts.json`` and the other JSON outputs hold no
bare ``NaN`` or ``Infinity`` (which ``json.dumps`` writes by default and strict readers refuse).
"""

from __future__ import annotations

import json

import numpy as np

__all__ = ["json_number", "json_numbers", "json_text", "strict_json"]


def json_number(v):
    """A number for ``shifts.json``: NaN (nothing measured) -> ``None`` (``null``), and
    infinity (a confidence with no second peak) -> the string ``"inf"`` (``"-inf"``), as
    ``shifts.csv`` writes it; standard JSON has no infinity.

    >>> json_number(2.5), json_number(float("nan")), json_number(float("inf"))
    (2.5, None, 'inf')
    """
    v = float(v)
    if v - v == 0.0:  # finite (NaN and infinities give NaN); no NumPy call per number
        return v
    if v != v:
        return None
    return "inf" if v > 0 else "-inf"


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


def json_numbers(values) -> list:
    """:func:`json_number` of every value of a 1-D array (or sequence of numbers), a column at
    a time.

    >>> json_numbers(np.array([1.5, np.nan, -np.inf, 0.0]))
    [1.5, None, '-inf', 0.0]
    """
    a = np.asarray(values, np.float64).ravel()
    out = a.tolist()
    for i in np.flatnonzero(~np.isfinite(a)).tolist():
        out[i] = json_number(out[i])
    return out


def json_text(doc: dict, records: str) -> str:
    """``doc`` (standard JSON values, ``records`` its last key) as indented JSON text, one
    line a record of ``doc[records]``, ending in a newline.  Why: the standard library's C
    encoder writes only unindented text, and indenting every value of a long run's records in
    Python took most of the time of writing ``shifts.json``.

    >>> print(json_text({"n": 2, "frames": [{"a": 1.5}, {"a": None}]}, "frames"), end="")
    {
     "n": 2,
     "frames": [
      {"a": 1.5},
      {"a": null}
     ]
    }
    >>> json.loads(json_text({"frames": []}, "frames"))
    {'frames': []}
    """
    rows = doc[records]
    head = json.dumps({**doc, records: []}, indent=1, allow_nan=False)
    empty = f"{json.dumps(records)}: []\n}}"
    if not head.endswith(empty):
        raise ValueError(f"json_text: {records!r} must be the document's last key")
    if not rows:
        return head + "\n"
    encode = json.JSONEncoder(allow_nan=False).encode
    body = ",\n  ".join(map(encode, rows))
    return f"{head[:-len(empty)]}{json.dumps(records)}: [\n  {body}\n ]\n}}\n"
