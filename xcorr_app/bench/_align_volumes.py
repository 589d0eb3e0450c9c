"""``xcorr bench align --volumes``: rigid 3-D registration of a (T, Z, Y, X) uint16 stack on the
GPU against a per-volume CuPy FFT loop (GPU) and scikit-image's 3-D ``phase_cross_correlation``
loop (CPU), in process and as one-shot processes.

The stack (default 64 volumes of 64x512x512, 2 GiB): four of scikit-image's images as layers,
each brightest at its own depth, blurred by a point-spread function wider in z, moved by known
subvoxel 3-D shifts (a Fourier shift, made on the GPU) under Poisson noise.  Rows:

* ``align_volumes`` from NumPy and from CuPy (``device="gpu"``, its defaults: the first volume
  as reference, the upsampled DFT at 20, the FFT check) and the **per-volume CuPy FFT loop**
  (:func:`~xcorr_app.bench._align_peers.cupy_pair_shift`: cuCIM's ``phase_cross_correlation``
  one pair at a time, ``upsample_factor=1``) from both: in process, warm, wall clock, the
  median of ``repeat`` runs;
* scikit-image's ``phase_cross_correlation`` (its defaults) on :data:`SKIMAGE_VOLUMES` volumes,
  its rate;
* one-shot processes on the stack written as a TIFF (page cache warm): ``xcorr align STACK
  --volumes --no-aligned -q`` and a script of the CuPy loop over the file's memory map, first
  with empty kernel caches, then warm;

with each row's RMS error (voxels, Euclidean) against the truth and the ratios the targets
name (:data:`TARGET_VS_SKIMAGE`, :data:`TARGET_VS_LOOP`).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import time

import numpy as np

from ..errors import InputError, XcorrError
from ._common import warm_median

#: (T, Z, Y, X) of the default and the quick stack
DEFAULT_SHAPE = (64, 64, 512, 512)
QUICK_SHAPE = (8, 32, 128, 128)
#: volumes scikit-image registers (its rate stands for the whole stack)
SKIMAGE_VOLUMES = 4
#: photons at the brightest voxel, the largest shift per axis (z, y, x) and the blur (sigma)
PHOTONS = 500.0
BOUND = (3.0, 6.0, 6.0)
PSF = (1.5, 1.0, 1.0)
IMAGES = ("camera", "coins", "moon", "astronaut")
#: the issue's targets: times scikit-image's rate and the CuPy loop's, one GPU
TARGET_VS_SKIMAGE = 20.0
TARGET_VS_LOOP = 3.0

_LOOP_SCRIPT = """
import sys
import cupy as cp
import numpy as np
import tifffile
from xcorr_app.bench._align_peers import cupy_pair_shift
mm = tifffile.memmap(sys.argv[1], mode="r")
ref = cp.asarray(mm[0]).astype(cp.float32)
np.save(sys.argv[2], np.array([cupy_pair_shift(ref, cp.asarray(v).astype(cp.float32))
                               for v in mm]))
"""


def layered_volume(shape, images=IMAGES) -> np.ndarray:
    """A (Z, Y, X) float32 volume of scikit-image's ``images`` as layers: each resized to (Y,
    X), brightest at its own depth (a Gaussian profile along z), blurred by :data:`PSF`."""
    from scipy import ndimage as ndi

    from ._accuracy_data import grey_image

    z, y, x = shape
    vol = np.zeros(shape, np.float32)
    zz = np.arange(z, dtype=np.float32)[:, None, None]
    width = z / len(images) / 1.5
    for k, name in enumerate(images):
        img = grey_image(name).astype(np.float32)
        img = ndi.zoom(img, (y / img.shape[0], x / img.shape[1]), order=1)[:y, :x]
        centre = (k + 0.5) * z / len(images)
        vol += np.exp(-0.5 * ((zz - centre) / width) ** 2) * (img / img.max())
    return ndi.gaussian_filter(vol, PSF, mode="nearest")


def make_stack(shape, seed=0):
    """``(stack, truth)``: (T, Z, Y, X) uint16 on the host, each volume the layered volume
    moved by a random subvoxel shift (within :data:`BOUND`, the first 0) by its Fourier phase
    and Poisson-sampled, made on the GPU; ``truth`` (T, 3): the shifts that undo the moves
    (what a registration returns)."""
    import cupy as cp

    t = shape[0]
    rng = np.random.default_rng(seed)
    moves = rng.uniform(-1, 1, (t, 3)) * np.asarray(BOUND)
    moves[0] = 0.0
    base = cp.asarray(layered_volume(shape[1:]))
    spec = cp.fft.rfftn(base)
    freqs = [cp.fft.fftfreq(n)[:, None, None] for n in shape[1:3]]
    kx = cp.fft.rfftfreq(shape[3])[None, None, :]
    scale = PHOTONS / float(base.max())
    cp.random.seed(seed)
    stack = np.empty(shape, np.uint16)
    for i, (dz, dy, dx) in enumerate(moves):
        ramp = cp.exp(-2j * np.pi * (freqs[0] * dz + freqs[1].transpose(1, 0, 2) * dy
                                     + kx * dx))
        moved = cp.fft.irfftn(spec * ramp, s=shape[1:])
        counts = cp.random.poisson(cp.clip(moved, 0, None) * scale)
        stack[i] = cp.clip(counts, 0, 65535).astype(cp.uint16).get()
    return stack, -moves


def _rms(shifts, truth) -> float:
    d = np.asarray(shifts, np.float64) - truth[:len(shifts)]
    return float(np.sqrt(np.mean((d ** 2).sum(axis=1))))


def _loop(stack):
    import cupy as cp

    from ._align_peers import cupy_pair_shift

    ref = cp.asarray(stack[0]).astype(cp.float32)
    return np.array([cupy_pair_shift(ref, cp.asarray(v).astype(cp.float32)) for v in stack])


def in_process_rows(stack, truth, repeat, echo):
    """The in-process rows: dicts of ``row``, ``seconds``, ``vps`` (volumes/s), ``rms``."""
    import cupy as cp
    from skimage.registration import phase_cross_correlation

    from ..alignment import align_volumes

    t = len(stack)
    gpu = cp.asarray(stack)
    rows = []

    def add(name, seconds, shifts, volumes=t):
        row = {"row": name, "seconds": seconds, "vps": volumes / seconds,
               "rms": _rms(shifts, truth)}
        rows.append(row)
        echo(f"  {name}: {seconds:.3f} s, {row['vps']:.1f} volumes/s, RMS {row['rms']:.3f}")

    for name, fn in (("xcorr align_volumes from NumPy",
                      lambda: align_volumes(stack, device="gpu").shifts),
                     ("xcorr align_volumes from CuPy",
                      lambda: align_volumes(gpu, device="gpu").shifts),
                     ("per-volume CuPy FFT loop from NumPy", lambda: _loop(stack)),
                     ("per-volume CuPy FFT loop from CuPy", lambda: _loop(gpu))):
        add(name, *warm_median(fn, repeat))
    gpu = None  # (its memory back to the pool)
    cp.get_default_memory_pool().free_all_blocks()
    k = min(SKIMAGE_VOLUMES, t)
    start = time.perf_counter()
    shifts = [phase_cross_correlation(stack[0], stack[i])[0] for i in range(k)]
    add(f"scikit-image phase_cross_correlation (CPU), {k} volumes",
        time.perf_counter() - start, shifts, k)
    return rows


def oneshot_rows(stack, truth, folder, repeat, echo):
    """The one-shot rows (cold, then warm caches): ``xcorr align --volumes`` and the loop's
    script on the stack as a TIFF in ``folder``."""
    import csv

    import tifffile

    from ._oneshot import Caches, python_argv, run_process, xcorr_argv

    path = folder / "volumes.tif"
    tifffile.imwrite(path, stack)
    caches = Caches()
    rows = []
    try:
        for name in ("xcorr align --volumes", "per-volume CuPy FFT loop script"):
            for state in ("cold", "warm"):
                times, shifts = [], None
                for k in range(1 if state == "cold" else repeat):
                    out = folder / f"out{k}"
                    shutil.rmtree(out, ignore_errors=True)
                    if name.startswith("xcorr"):
                        argv = xcorr_argv("align", path, "--volumes", "--no-aligned", "-q",
                                          "--device", "gpu", "--out", out)
                    else:
                        out.mkdir()
                        argv = python_argv("-c", _LOOP_SCRIPT, path, out / "shifts.npy")
                    r = run_process(argv, env=caches.env(state))
                    if r["returncode"] != 0:
                        raise XcorrError(f"{name} failed: {r['stderr']}")
                    times.append(r["seconds"])
                    if name.startswith("xcorr"):
                        with open(out / "shifts.csv", newline="") as f:
                            shifts = [[float(row[c]) for c in ("dz", "dy", "dx")]
                                      for row in csv.DictReader(f)]
                    else:
                        shifts = np.load(out / "shifts.npy")
                seconds = float(np.median(times))
                row = {"row": f"{name}, one-shot, {state}", "seconds": seconds,
                       "vps": len(stack) / seconds, "rms": _rms(shifts, truth)}
                rows.append(row)
                echo(f"  {row['row']}: {seconds:.2f} s, RMS {row['rms']:.3f}")
    finally:
        caches.close()
    return rows


def ratio_lines(rows) -> list:
    """The ratios the targets name, each with its verdict."""
    by = {r["row"]: r for r in rows}
    sk = next(r for r in rows if r["row"].startswith("scikit-image"))
    out = []
    for source in ("NumPy", "CuPy"):
        ours = by[f"xcorr align_volumes from {source}"]
        loop = by[f"per-volume CuPy FFT loop from {source}"]
        for what, peer, target in (("scikit-image", sk, TARGET_VS_SKIMAGE),
                                   ("the CuPy loop", loop, TARGET_VS_LOOP)):
            x = ours["vps"] / peer["vps"]
            out.append(f"- in process from {source}: {x:.1f}x {what} (target {target:g}x: "
                       f"{'met' if x >= target else 'not met'})")
    for state in ("cold", "warm"):
        ours = by.get(f"xcorr align --volumes, one-shot, {state}")
        loop = by.get(f"per-volume CuPy FFT loop script, one-shot, {state}")
        if ours and loop:
            x = loop["seconds"] / ours["seconds"]
            out.append(f"- one-shot, {state}: {x:.2f}x the CuPy loop's script (target "
                       f"{TARGET_VS_LOOP:g}x: {'met' if x >= TARGET_VS_LOOP else 'not met'}); "
                       f"{ours['vps'] / sk['vps']:.1f}x scikit-image's in-process rate")
    return out


def main(*, quick=False, frames=None, repeat=3, workdir=None, json_path=None, force=False,
         echo=print) -> int:
    """What ``xcorr bench align --volumes`` does: make the stack, time, print the table."""
    from .. import backend
    from ..io import prepare_outputs, write_text
    from ._align_data import work_folder
    from ._common import utc_now, versions_line
    from ._oneshot import bytecode_line

    shape = QUICK_SHAPE if quick else DEFAULT_SHAPE
    if frames is not None:
        shape = (int(frames),) + shape[1:]
    if shape[0] < 2 or int(repeat) < 1:
        raise InputError(f"--frames must be at least 2 and --repeat at least 1, got "
                         f"{shape[0]} and {repeat}")
    if not backend.gpu_available():
        raise XcorrError(f"xcorr bench align --volumes needs a GPU "
                         f"({backend.gpu_unavailable_reason()})")
    if importlib.util.find_spec("skimage") is None:
        raise XcorrError("xcorr bench align --volumes compares with scikit-image: "
                         "pip install scikit-image")
    if json_path is not None:
        prepare_outputs([json_path], force)
    nbytes = int(np.prod(shape)) * 2
    folder = work_folder(workdir, nbytes, "volumes")
    try:
        t0 = time.perf_counter()
        stack, truth = make_stack(shape)
        header = [f"xcorr bench align --volumes on {backend.gpu_name()}, {utc_now()}",
                  f"versions: {versions_line(('cupy', 'scipy', 'skimage'))}", bytecode_line(),
                  f"stack: {shape[0]} volumes of {shape[1]}x{shape[2]}x{shape[3]} uint16 "
                  f"({nbytes / 2**30:.2f} GiB), shifts within +-{BOUND} voxels (z, y, x), "
                  f"{PHOTONS:g} photons; made in {time.perf_counter() - t0:.1f} s",
                  f"in process: wall clock, median of {repeat} after a warm-up; one-shot: "
                  "fresh processes on the TIFF (page cache warm), cold = empty kernel caches"]
        for line in header:
            echo(line)
        rows = in_process_rows(stack, truth, int(repeat), echo)
        rows += oneshot_rows(stack, truth, folder, int(repeat), echo)
        table = ["| row | s | volumes/s | RMS voxels |", "| --- | --- | --- | --- |"]
        table += [f"| {r['row']} | {r['seconds']:.3f} | {r['vps']:.2f} | {r['rms']:.3f} |"
                  for r in rows]
        ratios = ratio_lines(rows)
        echo("")
        for line in table + [""] + ratios:
            echo(line)
        if json_path is not None:
            write_text(json_path, json.dumps({"header": header, "rows": rows,
                                              "ratios": ratios}, indent=1))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0
