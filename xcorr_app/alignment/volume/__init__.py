"""Volumes (T, Z, Y, X): rigid and piecewise-rigid 3-D registration (:func:`align_volumes`,
its :class:`VolumeResult`; the aligned volumes: :func:`shift_volumes`, by a motion field
:func:`warp_volumes` and :func:`warp_volume`; each plane's residual (dy, dx):
:func:`refine_planes`) and the depth of 2-D frames in a z-stack (:func:`zlocate`).

Examples
--------
>>> import numpy as np
>>> from xcorr_app.alignment.volume import align_volumes
>>> vol = np.random.default_rng(3).random((6, 12, 12))
>>> stack = np.stack([vol, np.roll(vol, 2, axis=0)])
>>> align_volumes(stack, upsample=1, device="cpu").shifts[1].tolist()
[-2.0, 0.0, 0.0]
"""

from ._api import (VolumeOptions, align_volumes, decide_boundary, parse_max_shift,
                   parse_upsample, parse_voxel_size)
from ._planes import refine_planes
from ._prebuild import prebuild_volumes
from ._result import VolumeResult
from ._shift import shift_volumes, warp_volume, warp_volumes
from ._zlocate import ZLOCATE_COLUMNS, ZlocateResult, zlocate
from ._source import Volumes, open_volumes

__all__ = ["ZLOCATE_COLUMNS", "VolumeOptions", "VolumeResult", "Volumes", "ZlocateResult", "align_volumes",
           "decide_boundary", "open_volumes", "parse_max_shift", "parse_upsample", "parse_voxel_size",
           "prebuild_volumes", "refine_planes", "shift_volumes", "warp_volume", "warp_volumes",
           "zlocate"]
