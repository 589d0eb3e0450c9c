"""Make the small drifting sample stacks in ``sample_data/`` from images shipped with scikit-image.

For each source image (``cell``, ``moon``, ``hubble``): 12 frames of 120x160 pixels drifting
along a smooth random walk with known subpixel shifts (up to about 6 px), shifted by Fourier
shift inside a larger crop and then cut from its middle (so no wrap-around seam enters the
frames), with Poisson (photon) noise at a peak SNR of 20, saved as uint16.  The cell image is
binned 2x2 first: at full resolution it is too smooth for subpixel registration at this noise
level, and binned, the whole cell fits in the frame.  Files:

* ``<name>_drift.tif``: one multi-page ImageJ TIFF (axes TYX);
* ``<name>_frames/frame_1.tif ... frame_12.tif``: the same frames, one file each;
* ``<name>_truth.csv``: columns ``frame,dy,dx``, the shift to APPLY to frame i to align it
  with frame 0, in (row, column) order -- what
  ``skimage.registration.phase_cross_correlation(frame0, frame_i, upsample_factor=100)``
  returns.  Frame i shows frame 0's content moved by +d, so the file holds -d.

Deterministic (fixed seed).  Regenerate with ``python sample_data/make_samples.py``.  The
script checks the convention with scikit-image's phase correlation on the noise-free frames
(and fails above 0.1 px), and prints its error on the saved noisy frames, a measure of how
hard each sample is.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import tifffile
from scipy import ndimage
from skimage import color, data
from skimage.measure import block_reduce
from skimage.registration import phase_cross_correlation

SOURCES = {  # name: (image loader, top-left corner of the padded crop in the image)
    "cell": (lambda: block_reduce(data.cell(), 2, np.mean), (119, 83)),
    "moon": (data.moon, (350, 150)),
    "hubble": (lambda: color.rgb2gray(data.hubble_deep_field()), (300, 500)),
}
N_FRAMES = 12
SHAPE = (120, 160)  # (H, W) of a frame
MARGIN = 16  # padding around the frame inside the shifted crop; larger than any drift
MAX_DRIFT = (4.0, 6.0)  # range of the largest drift magnitude of a sample, pixels
PEAK_PHOTONS = 400  # photons at the brightest pixel: peak SNR sqrt(400) = 20
SEED = 20240611
MAX_CONVENTION_ERROR = 0.1  # px, phase correlation vs truth on the noise-free frames


def smooth_drift(rng: np.random.Generator, n: int) -> np.ndarray:
    """``(n, 2)`` content displacements (dy, dx), starting at (0, 0): a smooth random walk."""
    velocity = np.cumsum(rng.normal(size=(n - 1, 2)), axis=0)  # random-walk velocity
    path = np.vstack([np.zeros(2), np.cumsum(velocity, axis=0)])
    return path * (rng.uniform(*MAX_DRIFT) / np.abs(path).max())


def shifted_frames(image: np.ndarray, corner, drift: np.ndarray) -> np.ndarray:
    """Noise-free frames of ``image`` moved by each ``drift`` row: ``frame[n] = crop[n - d]``."""
    (y0, x0), (h, w), m = corner, SHAPE, MARGIN
    crop = image[y0:y0 + h + 2 * m, x0:x0 + w + 2 * m].astype(np.float64)
    assert crop.shape == (h + 2 * m, w + 2 * m), "crop corner too close to the image border"
    spectrum = np.fft.fft2(crop)
    return np.stack([
        np.fft.ifft2(ndimage.fourier_shift(spectrum, d)).real[m:m + h, m:m + w] for d in drift
    ])


def max_error(frames: np.ndarray, truth: np.ndarray) -> float:
    """Largest difference between scikit-image's phase correlation and ``truth``, pixels."""
    measured = [phase_cross_correlation(frames[0], f, upsample_factor=100)[0] for f in frames]
    return float(np.abs(np.array(measured) - truth).max())


def make_sample(name: str, out: Path, seed: int) -> tuple[float, float]:
    """Write the files of one sample; return the check errors (noise-free, noisy)."""
    load, corner = SOURCES[name]
    rng = np.random.default_rng(seed)
    drift = smooth_drift(rng, N_FRAMES)
    clean = shifted_frames(load(), corner, drift)
    photons = np.clip(clean, 0, None) * (PEAK_PHOTONS / clean.max())
    frames = rng.poisson(photons).astype(np.uint16)
    truth = -drift + 0.0  # shift to apply to frame i to align it with frame 0 (+0.0: no "-0")

    tifffile.imwrite(out / f"{name}_drift.tif", frames, imagej=True, metadata={"axes": "TYX"})
    folder = out / f"{name}_frames"
    folder.mkdir(exist_ok=True)
    for i, frame in enumerate(frames, start=1):
        tifffile.imwrite(folder / f"frame_{i}.tif", frame)
    rows = [f"{i},{dy:.4f},{dx:.4f}" for i, (dy, dx) in enumerate(truth)]
    (out / f"{name}_truth.csv").write_text("frame,dy,dx\n" + "\n".join(rows) + "\n")
    return max_error(clean, truth), max_error(frames, truth)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="folder to write to (default: the folder of this script)")
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    worst = 0.0
    for k, name in enumerate(SOURCES):
        clean_error, noisy_error = make_sample(name, out, seed=SEED + k)
        worst = max(worst, clean_error)
        print(f"{name}: max |phase_cross_correlation - truth| = {clean_error:.3f} px noise-free, "
              f"{noisy_error:.3f} px on the saved noisy frames")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{out} total size: {total / 1e6:.2f} MB")
    if worst > MAX_CONVENTION_ERROR:
        raise SystemExit(f"convention check failed: {worst:.3f} px > {MAX_CONVENTION_ERROR} px")


if __name__ == "__main__":
    main()
