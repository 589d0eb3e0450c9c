"""Stacks with known subpixel drift, made from real photographs (scikit-image's astronaut and
coins) with Poisson noise: the ground truth of the accuracy and streaming tests."""

import numpy as np
import tifffile
from scipy import ndimage as ndi


def drift_stack(rng, n=12, shape=(96, 112), max_shift=6.0, peak_counts=100.0, image="astronaut"):
    """``(stack, truth)``: ``n`` uint16 frames of ``shape`` cut from a real image moved by
    random subpixel shifts, Poisson noise at ``peak_counts`` photons at the brightest pixel
    (peak SNR ``sqrt(peak_counts)``); ``truth[i]`` is the shift xcorr must report for frame
    ``i`` against frame 0 (the shift that aligns it, scikit-image's convention)."""
    from skimage import data

    base = getattr(data, image)().astype(np.float64)
    if base.ndim == 3:
        base = base.mean(axis=2)
    # Band-limit it like an optical system (a PSF of about 2 px), so that a subpixel move is
    # a true shift and not an aliasing artefact of the resampling.
    base = ndi.gaussian_filter(base, 1.0)
    h, w = shape
    margin = int(np.ceil(max_shift)) + 8
    # A textured region (what a user registers on), not the flat sky: the most detailed of
    # a few random crops.
    best = -1.0
    for _ in range(8):
        y, x = (int(rng.integers(margin, base.shape[0] - h - margin)),
                int(rng.integers(margin, base.shape[1] - w - margin)))
        detail = float(np.abs(np.diff(base[y:y + h, x:x + w], axis=1)).mean())
        if detail > best:
            best, y0, x0 = detail, y, x
    window = base[y0 - margin:y0 + h + margin, x0 - margin:x0 + w + margin]
    moves = rng.uniform(-max_shift, max_shift, size=(n, 2))
    moves[0] = 0.0
    frames = []
    for move in moves:
        moved = ndi.shift(window, move, order=3, mode="reflect")[margin:margin + h,
                                                                   margin:margin + w]
        frames.append(moved)
    frames = np.array(frames)
    lo, hi = frames.min(), frames.max()  # the scene spans 0 .. peak_counts photons
    frames = (frames - lo) / (hi - lo) * peak_counts
    noisy = rng.poisson(np.clip(frames, 0, None)).astype(np.uint16)
    return noisy, -moves  # frame i is the scene moved by +moves[i]: it aligns by -moves[i]


def write_stack(path, stack):
    tifffile.imwrite(path, stack, imagej=True, metadata={"axes": "TYX"})
    return path


def write_damaged_tiff(path, stack, page):
    """Write ``stack`` as a zlib-compressed TIFF and damage the data of ``page``: the file's
    structure stays whole (it opens), reading that page fails."""
    tifffile.imwrite(path, stack, compression="zlib", photometric="minisblack")
    with tifffile.TiffFile(path) as tif:
        offset, size = tif.pages[page].dataoffsets[0], tif.pages[page].databytecounts[0]
    with open(path, "r+b") as f:
        f.seek(offset + 2)
        f.write(b"\xff" * min(64, size - 4))
    return path


def write_cut_tiff(path, stack, layout, cut):
    """Write a 20-frame ``stack`` in ``layout`` (plain, imagej, zlib, imagej-zlib, or imagej-2ch:
    10 frames of 2 channels) and cut the file short: 10 bytes into the second page's entries
    (``"page1"``) or at a fraction ``cut`` of its size.  A truncated file, as a copy that
    stopped half-way leaves it."""
    kw = {"compression": "zlib"} if "zlib" in layout else {}
    if layout == "imagej-2ch":
        tifffile.imwrite(path, stack.reshape(-1, 2, *stack.shape[1:]), imagej=True,
                         metadata={"axes": "TCYX"})
    elif layout.startswith("imagej"):
        tifffile.imwrite(path, stack, imagej=True, metadata={"axes": "TYX"}, **kw)
    else:
        tifffile.imwrite(path, stack, photometric="minisblack", **kw)
    whole = path.read_bytes()
    with tifffile.TiffFile(path) as tif:
        second = tif.pages[1].offset
    path.write_bytes(whole[:second + 10] if cut == "page1" else whole[:int(len(whole) * cut)])
    return path


def periodic_texture(rng, shape, width=0.08):
    """Noise low-passed in Fourier space (a Gaussian of ``width`` cycles a sample): smooth,
    periodic, in [0, 1], of any number of dimensions."""
    spectrum = np.fft.fftn(rng.standard_normal(shape))
    k = np.meshgrid(*(np.fft.fftfreq(n) for n in shape), indexing="ij")
    spectrum *= np.exp(-sum(q ** 2 for q in k) / (2 * width ** 2))
    v = np.fft.ifftn(spectrum).real
    return (v - v.min()) / (v.max() - v.min())


def fourier_moved(v, shift):
    """``v`` moved by ``shift`` (one value an axis, in samples) along its last
    ``len(shift)`` axes by a Fourier phase ramp (a periodic move: what leaves one edge comes in
    at the other)."""
    axes = tuple(range(v.ndim - len(shift), v.ndim))
    k = np.meshgrid(*(np.fft.fftfreq(v.shape[a]) for a in axes), indexing="ij")
    phase = np.exp(-2j * np.pi * sum(s * q for s, q in zip(shift, k)))
    return np.fft.ifftn(np.fft.fftn(v, axes=axes) * phase, axes=axes).real
