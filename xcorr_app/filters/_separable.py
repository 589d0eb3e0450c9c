"""GPU launcher of the fused separable correlation (``kernels/filters/separable_conv.cu``): the
vertical and horizontal 1-D passes of a separable filter in one kernel, through shared memory.

Ours.  :func:`xcorr_app.filters._api.gaussian` and the other separable filters otherwise run
two passes of the reuse kernels (:mod:`xcorr_app.filters._reuse`), each reading and writing
every frame, a pass more over memory than the preparation of frames before correlation
(``prefilter="gaussian:1"``) needs (docs/kernels.md).  Here
each 64 x 64 tile of outputs is staged once with its halo (the boundary mode applied while
staging), filtered vertically, then horizontally: float32 frames, the same count of odd taps
along both axes (:data:`SEPARABLE_SIZES`), origin 0; other cases keep the two passes.

Examples
--------
>>> import cupy as cp, numpy as np  # doctest: +SKIP
>>> taps = np.array([0.25, 0.5, 0.25])
>>> separable_correlate(cp.ones((2, 9, 11), cp.float32), taps, taps, "reflect").shape  # doctest: +SKIP
(2, 9, 11)
"""

from __future__ import annotations

import numpy as np

from .._cuda import KernelFamily, kept_on_device
from ..backend import xp_for
from ..errors import InputError
from ._modes import MODE_IDS

#: taps along each axis compiled (odd: the filter centred, origin 0)
SEPARABLE_SIZES = (3, 5, 7, 9, 11)
TILE = 64  # kernels/filters/separable_conv.cu: SEP_TILE_W, SEP_TILE_H
TILES = 4  # SEP_TILES: tiles a block, one below the other
THREADS = (32, 8)
MAX_GRID_Z = 65535
SEPARABLE = KernelFamily("separable_conv.cu", "separable_correlate",
                         [(f,) for f in SEPARABLE_SIZES])


def fused_fits(stack, taps_y, taps_x, origin=(0, 0)) -> bool:
    """Whether the fused kernel filters ``stack``: float32 CuPy, the same odd count of taps
    along both axes (:data:`SEPARABLE_SIZES`), origin 0."""
    return (not isinstance(stack, np.ndarray) and stack.dtype == np.float32
            and len(taps_y) == len(taps_x) and len(taps_y) in SEPARABLE_SIZES
            and tuple(origin) == (0, 0))


def separable_correlate(stack, taps_y, taps_x, mode="reflect", cval=0.0, out=None,
                        subtract=None):
    """``scipy.ndimage.correlate1d`` along the rows' axis with ``taps_y``, then along the
    columns' with ``taps_x``, of every frame of a float32 CuPy stack (:func:`fused_fits`).

    Parameters
    ----------
    stack : cupy.ndarray
        ``(H, W)`` or ``(N, H, W)`` float32.
    taps_y, taps_x : array_like
        The 1-D filters (one odd length of :data:`SEPARABLE_SIZES`).
    mode, cval
        As ``scipy.ndimage``.
    out : cupy.ndarray, optional
        A C-contiguous float32 array of the stack's shape to write into.
    subtract : cupy.ndarray, optional
        ``(N,)`` float32: subtracted from every output of each frame as it is stored (as
        ``out -= subtract[:, None, None]`` would after the filter).

    Returns
    -------
    cupy.ndarray
        float32, the stack's shape.
    """
    cp = xp_for("gpu")  # (without CuPy: an InputError saying what to install)

    x = cp.ascontiguousarray(stack)
    frames = x if x.ndim == 3 else x[None]
    n, h, w = frames.shape
    res = cp.empty(x.shape, cp.float32) if out is None else out
    dst = res if res.ndim == 3 else res[None]
    if subtract is not None and (subtract.shape != (n,) or subtract.dtype != cp.float32
                                 or not subtract.flags.c_contiguous):
        raise InputError(f"subtract must be a C-contiguous float32 array of shape {(n,)}")
    kernel = SEPARABLE.get(len(taps_y))
    shared = shared_bytes(len(taps_y))
    if shared > kernel.max_dynamic_shared_size_bytes:  # (over 48 KiB: opted into)
        kernel.max_dynamic_shared_size_bytes = shared
    taps = kept_on_device(np.concatenate([np.asarray(taps_y, np.float32),
                                          np.asarray(taps_x, np.float32)]))
    for a in range(0, n, MAX_GRID_Z):
        b = min(n, a + MAX_GRID_Z)
        kernel((-(-w // TILE), -(-h // (TILE * TILES)), b - a), THREADS,
               (frames[a:b], dst[a:b], taps, np.int32(h), np.int32(w), np.int32(MODE_IDS[mode]),
                np.float32(cval), dst[a:b] if subtract is None else subtract[a:b],
                np.int32(subtract is not None)),
               shared_mem=shared)
    return res


def shared_bytes(taps) -> int:
    """The kernel's dynamic shared memory for ``taps`` taps an axis: two staging buffers of the
    tile and its halo and the vertical pass's rows (float32, a padding column each).

    >>> shared_bytes(9)
    60736
    """
    return (2 * (TILE + taps - 1) + TILE) * (TILE + taps) * 4
