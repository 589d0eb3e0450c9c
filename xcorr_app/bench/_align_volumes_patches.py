"""``xcorr bench align --volumes --patches GZxGYxGX``: piecewise-rigid 3-D registration on the
GPU against the rigid 3-D run, on volumes deformed by a known smooth field.

The stack (default 32 volumes of 64x256x256 uint16; ``--quick`` 8 of 32x128x128): the layered
volume of :mod:`._align_volumes` (scikit-image's images as layers, each at its own depth),
each volume sampling it at ``p + a_t + B_t p`` (cubic spline, on the GPU): a rigid drift
``a_t`` and a shear whose dz grows along x and whose dx grows along z, up to
:data:`GRADIENT` voxels across the volume in the last one, under Poisson noise.  The truth at
a point ``q`` of the reference is ``(I + B_t)^-1 (a_t + B_t q)`` (:func:`field_truth`).

Rows (in process, warm, wall clock, the median of ``repeat`` runs): ``align_volumes(...,
patches=...)`` from NumPy and from CuPy, and the rigid run from CuPy, each with its field's RMS
error (voxels, Euclidean) at the patch centres.  Other registrations enter through
``peers`` of :func:`piecewise_rows` (a name and a callable ``(stack, centres) -> (T, gz, gy,
gx, 3)`` field at the centres, align's sign): warpfield's row (:func:`warpfield_peers`) is
added where warpfield is installed (it is not a dependency).
"""

from __future__ import annotations

import json
import time

import numpy as np

from ..errors import InputError, XcorrError
from ._common import warm_median

DEFAULT_SHAPE = (32, 64, 256, 256)
QUICK_SHAPE = (8, 32, 128, 128)
DEFAULT_PATCHES = (2, 4, 4)
#: voxels the shear moves across the volume in the last volume; the rigid drift per axis
GRADIENT = 2.0
DRIFT = (1.0, 2.0, 2.0)
PHOTONS = 500.0
#: voxels around the volume sampled from the layered volume (the drift and shear's reach)
MARGIN = 8


def field_truth(moves, centres) -> np.ndarray:
    """``(T, ..., 3)``: the shift that aligns each volume at ``centres`` (..., 3) of the
    reference, from its ``(a, B)`` (module docstring)."""
    q = np.asarray(centres, float).reshape(-1, 3)
    out = [np.linalg.solve(np.eye(3) + b, a[:, None] + b @ q.T).T for a, b in moves]
    return np.stack(out).reshape(len(moves), *np.shape(centres))


def moves_of(t, shape, seed=0) -> list:
    """The ``(a, B)`` of ``t`` volumes of ``shape`` (Z, Y, X): volume 0 the reference."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(t):
        a = np.zeros(3) if i == 0 else rng.uniform(-1, 1, 3) * np.asarray(DRIFT)
        b = np.zeros((3, 3))
        b[0, 2] = GRADIENT * i / max(t - 1, 1) / shape[2]  # dz along x
        b[2, 0] = GRADIENT * i / max(t - 1, 1) / shape[0]  # dx along z
        out.append((a, b))
    return out


def make_stack(shape, seed=0):
    """``(stack (T, Z, Y, X) uint16 host, moves)`` made on the GPU (module docstring)."""
    import cupy as cp
    from cupyx.scipy import ndimage as cndi

    from ._align_volumes import layered_volume

    t, vol = shape[0], shape[1:]
    base = cp.asarray(layered_volume(tuple(n + 2 * MARGIN for n in vol)))
    base = cndi.spline_filter(base, order=3)  # (once: each volume samples it)
    p = cp.indices(vol, dtype=cp.float32)
    moves = moves_of(t, vol, seed)
    scale = PHOTONS / float(base.max())
    cp.random.seed(seed)
    stack = np.empty(shape, np.uint16)
    for i, (a, b) in enumerate(moves):
        coords = p + MARGIN + cp.asarray(a, cp.float32)[:, None, None, None] + cp.einsum(
            "ij,jzyx->izyx", cp.asarray(b, cp.float32), p)
        moved = cndi.map_coordinates(base, coords, order=3, prefilter=False)
        stack[i] = cp.clip(cp.random.poisson(cp.clip(moved, 0, None) * scale), 0,
                           65535).astype(cp.uint16).get()
    return stack, moves


def _rms(field, truth) -> float:
    return float(np.sqrt(np.nanmean(np.sum((np.asarray(field) - truth) ** 2, axis=-1))))


def piecewise_rows(stack, moves, patches, repeat, echo, peers=None) -> list:
    """The rows: dicts of ``row``, ``seconds``, ``vps`` (volumes/s), ``rms`` (the field's
    error at the patch centres, voxels).  ``peers``: ``{name: fn(stack, centres)}``, each
    timed and scored as ours (module docstring)."""
    import cupy as cp

    from ..alignment import align_volumes

    t = len(stack)
    gpu = cp.asarray(stack)
    rows, centres = [], None

    def add(name, seconds, field):
        row = {"row": name, "seconds": seconds, "vps": t / seconds,
               "rms": _rms(field, field_truth(moves, centres))}
        rows.append(row)
        echo(f"  {name}: {seconds:.3f} s, {row['vps']:.1f} volumes/s, field RMS "
             f"{row['rms']:.3f} voxel")

    grid = "x".join(map(str, patches))
    for source, data in (("NumPy", stack), ("CuPy", gpu)):
        seconds, res = warm_median(
            lambda d=data: align_volumes(d, patches=patches, device="gpu"), repeat)
        centres = res.patch_centres
        add(f"xcorr align_volumes patches {grid} from {source}", seconds, res.motion_field)
    seconds, res = warm_median(lambda: align_volumes(gpu, device="gpu"), repeat)
    add("xcorr align_volumes rigid from CuPy", seconds,
        np.broadcast_to(res.shifts[:, None, None, None, :], (t, *centres.shape)))
    for name, fn in (peers or {}).items():
        add(name, *warm_median(lambda f=fn: f(gpu, centres), repeat))
    return rows


def warpfield_peers() -> dict:
    """``{name: fn}`` of warpfield (its default recipe: a translation level and an affine one)
    where it is installed, else ``{}``: each volume registered to the first by
    ``warpfield.register_volumes``, its field at the centres ``q`` being ``q - p``, where its
    map pushes ``q`` of the reference to ``p`` of the volume (align's sign)."""
    try:
        import warpfield
    except ImportError:
        return {}
    import cupy as cp

    def run(stack, centres):
        q = cp.asarray(np.asarray(centres, np.float32).reshape(-1, 3).T)
        ref = stack[0].astype(cp.float32)
        out = []
        for vol in stack:
            _, warp_map, _ = warpfield.register_volumes(ref, vol.astype(cp.float32),
                                                        warpfield.Recipe(), verbose=False)
            out.append(cp.asnumpy(q - warp_map.push_coordinates(q)).T)
        return np.stack(out).reshape(len(stack), *np.shape(centres))

    return {"warpfield register_volumes (default recipe) from CuPy": run}


def main(*, quick=False, frames=None, patches=None, repeat=3, json_path=None, force=False,
         echo=print, peers=None) -> int:
    """What ``xcorr bench align --volumes --patches`` does: make the stack, time, print the
    table (and write it as JSON)."""
    from .. import backend
    from ..alignment.piecewise import parse_patches
    from ..io import prepare_outputs, write_text
    from ._common import utc_now, versions_line

    shape = QUICK_SHAPE if quick else DEFAULT_SHAPE
    if frames is not None:
        shape = (int(frames),) + shape[1:]
    if shape[0] < 2 or int(repeat) < 1:
        raise InputError(f"--frames must be at least 2 and --repeat at least 1, got "
                         f"{shape[0]} and {repeat}")
    grid = parse_patches(DEFAULT_PATCHES if patches is None else patches, ndim=3)
    if not backend.gpu_available():
        raise XcorrError(f"xcorr bench align --volumes --patches needs a GPU "
                         f"({backend.gpu_unavailable_reason()})")
    if json_path is not None:
        prepare_outputs([json_path], force)
    t0 = time.perf_counter()
    stack, moves = make_stack(shape)
    header = [f"xcorr bench align --volumes --patches on {backend.gpu_name()}, {utc_now()}",
              f"versions: {versions_line(('cupy', 'scipy'))}",
              f"stack: {shape[0]} volumes of {shape[1]}x{shape[2]}x{shape[3]} uint16, drift "
              f"within +-{DRIFT} voxels, a shear of up to {GRADIENT:g} voxels across the "
              f"volume, {PHOTONS:g} photons; made in {time.perf_counter() - t0:.1f} s",
              f"in process: wall clock, median of {repeat} after a warm-up; field RMS: at "
              f"the patch centres against the known field"]
    for line in header:
        echo(line)
    peers = warpfield_peers() if peers is None else peers
    rows = piecewise_rows(stack, moves, grid, int(repeat), echo, peers)
    table = ["| row | s | volumes/s | field RMS voxels |", "| --- | --- | --- | --- |"]
    table += [f"| {r['row']} | {r['seconds']:.3f} | {r['vps']:.2f} | {r['rms']:.3f} |"
              for r in rows]
    if not peers:
        table.append("warpfield: not compared (not installed: pip install warpfield)")
    echo("")
    for line in table:
        echo(line)
    if json_path is not None:
        write_text(json_path, json.dumps({"header": header, "rows": rows}, indent=1))
    return 0
