"""What :func:`~._api.align_volumes` returns: per time point the (dz, dy, dx) shift, its
correlation peak and confidence, its flags, and the run's notes; as a table or a CSV file.

Examples
--------
>>> import numpy as np
>>> r = VolumeResult(np.array([[0.0, 0, 0], [0.5, -1, 2]]), np.ones(2), np.ones(2),
...                  np.zeros(2, bool), np.ones(2, bool), voxel_size=(2.0, 0.5, 0.5))
>>> r.shifts_um.tolist()
[[0.0, 0.0, 0.0], [1.0, -0.5, 1.0]]
>>> r.rows()[1]["dz"], r.rows()[1]["dz_um"]
(0.5, 1.0)
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field

import numpy as np

#: the columns of :meth:`VolumeResult.rows` (the micrometre ones only with a voxel size)
COLUMNS = ("t", "dz", "dy", "dx", "peak", "confidence", "at_bound", "verified")
UM_COLUMNS = ("dz_um", "dy_um", "dx_um")


@dataclass
class VolumeResult:
    """The shifts of a (T, Z, Y, X) stack's volumes onto their reference.

    Attributes
    ----------
    shifts : (T, 3) float64 ndarray
        (dz, dy, dx) in voxels that moves each volume onto the reference (scikit-image's
        convention: ``scipy.ndimage.shift(volume, shift)`` aligns it); NaN for a constant
        volume (nothing to correlate: peak NaN, confidence 0, not verified; a note says so).
    peak : (T,) float64 ndarray
        The normalized correlation at the integer peak (1: identical up to the shift).
    confidence : (T,) float64 ndarray
        ``1 - second / peak``, 0..1: how far the peak stands above the search window's next
        highest value away from it.
    at_bound : (T,) bool ndarray
        The peak lies on the ``max_shift`` border: the true shift may lie beyond it.
    verified : (T,) bool ndarray
        The FFT's correlation at its peak agrees (1e-3 relative) with the direct sum the
        subvoxel refinement computes in double precision.
    voxel_size : (z, y, x) or None
        Only scales :attr:`shifts_um`.
    notes : list of str
        How the run went (reference, device, chunk size, flagged volumes).
    motion_field : (T, gz, gy, gx, 3) float64 ndarray or None
        Piecewise-rigid runs (``patches``): every patch's shift (dz, dy, dx), align's sign
        (rigid plus deviation; the rigid shift where the patch was an outlier; NaN for a
        constant volume); None for a rigid run.
    patch_centres : (gz, gy, gx, 3) float64 ndarray or None
        The patch centres (z, y, x) in voxels of the reference.
    patch_peak, patch_low : (T, gz, gy, gx) ndarrays or None
        Each patch's normalized correlation at its peak, and whether it took the rigid shift
        (an outlier: :mod:`._piecewise`).
    patches : dict or None
        The grid: ``grid``, ``size``, ``overlap`` (voxels per axis), ``max_deviation`` and
        ``centres``, as ``shifts.json`` records it.
    boundary : str
        How the run treated the volumes' faces: ``"linear"`` (cropped) or ``"circular"``
        (wrap-around), what ``boundary="auto"`` decided.
    """

    shifts: np.ndarray
    peak: np.ndarray
    confidence: np.ndarray
    at_bound: np.ndarray
    verified: np.ndarray
    voxel_size: tuple | None = None
    notes: list = field(default_factory=list)
    device: str = "cpu"
    motion_field: np.ndarray = None
    patch_centres: np.ndarray = None
    patch_peak: np.ndarray = None
    patch_low: np.ndarray = None
    patches: dict = None
    boundary: str = "linear"

    def set_field(self, grid, motion_field, peak, low, chunk=None) -> None:
        """Keep what a patch pass measured (:mod:`._piecewise`), with a note on the grid (and
        the volumes a ``chunk`` of the pass held) and one on the outliers."""
        self.motion_field, self.patch_peak, self.patch_low = motion_field, peak, low
        self.patch_centres, self.patches = grid.centres, grid.settings()
        g, size = grid.grid, grid.size
        self.notes.append(f"patches: {g[0]}x{g[1]}x{g[2]} of {size[0]}x{size[1]}x{size[2]} "
                          f"voxels within {grid.max_deviation} of the rigid shift"
                          + ("" if chunk is None else f", {chunk} volume(s) per chunk"))
        measured = ~np.isnan(self.shifts).any(axis=1)
        k = int(low[measured].sum())
        if k:
            self.notes.append(f"{k} patch{'' if k == 1 else 'es'} of {low[measured].size} "
                              "took their volume's rigid shift (low peak, on the max_deviation "
                              "border or constant)")

    def deviation(self):
        """``(T, gz, gy, gx, 3)``: :attr:`motion_field` minus the rigid :attr:`shifts` (None
        without patches)."""
        if self.motion_field is None:
            return None
        return self.motion_field - self.shifts[:, None, None, None, :]

    def field_document(self) -> dict:
        """The piecewise-rigid run's part of ``shifts.json``: the grid (:attr:`patches`) with
        ``field`` (T, gz, gy, gx, 3), ``peak`` and ``low`` (T, gz, gy, gx) as nested lists
        (NaN as NaN: the writer makes it null); None for a rigid run."""
        if self.motion_field is None:
            return None
        return {**self.patches, "field": self.motion_field.tolist(),
                "peak": self.patch_peak.tolist(), "low": self.patch_low.tolist()}

    @property
    def constant_volumes(self) -> np.ndarray:
        """Indices of the constant volumes (shift NaN)."""
        return np.flatnonzero(np.isnan(self.shifts).any(axis=1))

    @property
    def shifts_um(self):
        """(T, 3) shifts in micrometres (``shifts * voxel_size``), or None without a voxel
        size."""
        if self.voxel_size is None:
            return None
        return self.shifts * np.asarray(self.voxel_size, np.float64)

    def rows(self) -> list:
        """One dict per time point with :data:`COLUMNS` (and :data:`UM_COLUMNS`)."""
        um = self.shifts_um
        out = []
        for t in range(len(self.shifts)):
            row = {"t": t, "dz": float(self.shifts[t, 0]), "dy": float(self.shifts[t, 1]),
                   "dx": float(self.shifts[t, 2]), "peak": float(self.peak[t]),
                   "confidence": float(self.confidence[t]),
                   "at_bound": bool(self.at_bound[t]), "verified": bool(self.verified[t])}
            if um is not None:
                row.update(zip(UM_COLUMNS, (float(v) for v in um[t])))
            out.append(row)
        return out

    def to_csv(self) -> str:
        """The table as CSV text (header first)."""
        columns = COLUMNS + (UM_COLUMNS if self.voxel_size is not None else ())
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in self.rows():
            writer.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v)
                             for k, v in row.items()})
        return buf.getvalue()
