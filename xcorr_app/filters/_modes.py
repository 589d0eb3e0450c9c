"""The boundary modes of the filters (scipy.ndimage's names and meaning) and their ids in the
GPU kernels (``kernels/include/boundary.cuh``'s ``BoundaryMode``, in the same order).

Examples
--------
>>> MODES[0], MODE_IDS["wrap"]
('reflect', 4)
"""

#: boundary modes, as ``scipy.ndimage``: ``reflect`` (default), ``constant`` (with ``cval``),
#: ``nearest``, ``mirror``, ``wrap``
MODES = ("reflect", "constant", "nearest", "mirror", "wrap")
#: boundary mode -> ``kernels/include/boundary.cuh``'s ``BoundaryMode``
MODE_IDS = {m: i for i, m in enumerate(MODES)}
