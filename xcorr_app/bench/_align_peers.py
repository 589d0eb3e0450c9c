"""The peers of ``xcorr bench align``: reading the file with tifffile alone (whole, in chunks,
in parallel threads), a per-pair CuPy FFT loop (what a loop over cuCIM's
``phase_cross_correlation`` does) and scikit-image's ``phase_cross_correlation`` (CPU)."""

from __future__ import annotations

import concurrent.futures

import numpy as np

__all__ = ["READ_CHUNK", "read_imread", "read_memmap_chunks", "read_memmap_parallel",
           "cupy_pair_shift", "cupy_pair_loop", "skimage_loop"]

#: frames per chunk of the chunked read
READ_CHUNK = 64


def read_imread(path, frames=None):
    """``tifffile.imread``: the whole file (or the pages ``frames``) into a new array."""
    import tifffile

    return tifffile.imread(path) if frames is None else tifffile.imread(path, key=frames)


def read_memmap_chunks(path, chunk_frames=READ_CHUNK, stop=None) -> int:
    """Copy every frame (up to ``stop``) out of ``tifffile.memmap(path)`` into one reused
    buffer of ``chunk_frames`` frames; returns the frames read."""
    import tifffile

    mm = tifffile.memmap(path, mode="r")
    mm = mm.reshape((-1, *mm.shape[-2:]))
    n = len(mm) if stop is None else min(stop, len(mm))
    _copy_frames(mm, 0, n, chunk_frames)
    del mm
    return n


def _copy_frames(mm, start, stop, chunk_frames):
    """Copy frames ``start:stop`` of a memory map into one reused buffer, a chunk at a time."""
    buf = np.empty((min(chunk_frames, stop - start), *mm.shape[1:]), mm.dtype)
    for a in range(start, stop, chunk_frames):
        k = min(chunk_frames, stop - a)
        np.copyto(buf[:k], mm[a:a + k])


def cupy_pair_shift(reference, frame) -> np.ndarray:
    """One call of cuCIM's ``phase_cross_correlation(reference, frame)`` (``upsample_factor=1``,
    ``normalization="phase"``), as a loop over pairs makes it: both FFTs every call, the
    normalized cross-power spectrum, its inverse FFT, argmax, and the error terms cuCIM
    computes (image amplitudes, peak value); the shift comes back to the host.  Images of any
    number of dimensions (frames, volumes).

    The inputs are float32 CuPy arrays: a generous peer, since cuCIM given the uint16 frames
    would compute in complex128 (CuPy's FFT promotes integer input to double precision).
    Returns the shift to apply to ``frame`` (``(dy, dx)``, ``(dz, dy, dx)``), NumPy float64.
    """
    import cupy as cp

    src_freq = cp.fft.fftn(reference)
    target_freq = cp.fft.fftn(frame)
    product = src_freq * target_freq.conj()
    eps = np.finfo(product.real.dtype).eps
    product /= cp.maximum(cp.abs(product), 100 * eps)
    cc = cp.fft.ifftn(product)
    idx = cp.argmax(cp.abs(cc))
    peak = cc.ravel()[idx]
    src_amp = cp.sum(cp.real(src_freq * src_freq.conj())) / src_freq.size
    target_amp = cp.sum(cp.real(target_freq * target_freq.conj())) / target_freq.size
    host = cp.stack([idx.astype(cp.float64), src_amp.astype(cp.float64),
                     target_amp.astype(cp.float64), cp.abs(peak).astype(cp.float64)]).get()
    index = np.unravel_index(int(host[0]), cc.shape)
    return np.array([i - n if i > n // 2 else i for i, n in zip(index, cc.shape)], np.float64)


def cupy_pair_loop(path, stop=None) -> np.ndarray:
    """The per-pair CuPy loop over the file: frame 0 is the reference (uploaded once, FFT'd
    every call); every frame is read from the memory map, uploaded and registered.  Returns
    the ``(n, 2)`` shifts."""
    import cupy as cp
    import tifffile

    mm = tifffile.memmap(path, mode="r")
    mm = mm.reshape((-1, *mm.shape[-2:]))
    n = len(mm) if stop is None else min(stop, len(mm))
    ref = cp.asarray(mm[0]).astype(cp.float32)
    out = np.zeros((n, 2))
    for i in range(n):
        out[i] = cupy_pair_shift(ref, cp.asarray(mm[i]).astype(cp.float32))
    del mm
    return out


def skimage_loop(path, stop, upsample_factor=1) -> np.ndarray:
    """``skimage.registration.phase_cross_correlation(frame0, frame, upsample_factor=...)`` for
    the first ``stop`` frames of the file (phase normalization, scikit-image's defaults)."""
    import tifffile
    from skimage.registration import phase_cross_correlation

    mm = tifffile.memmap(path, mode="r")
    mm = mm.reshape((-1, *mm.shape[-2:]))
    ref = np.array(mm[0])
    n = min(stop, len(mm))
    out = np.zeros((n, 2))
    for i in range(n):
        out[i] = phase_cross_correlation(ref, np.asarray(mm[i]),
                                         upsample_factor=upsample_factor)[0]
    del mm
    return out


def read_memmap_parallel(path, readers, chunk_frames=READ_CHUNK) -> int:
    """:func:`read_memmap_chunks` by ``readers`` threads at once, each copying one contiguous
    range of frames (as ``--gpus`` reads: one reader per GPU); returns the frames read."""
    import tifffile

    from ..streaming import frame_ranges

    mm = tifffile.memmap(path, mode="r")
    mm = mm.reshape((-1, *mm.shape[-2:]))
    ranges = frame_ranges(len(mm), readers)
    with concurrent.futures.ThreadPoolExecutor(len(ranges)) as pool:
        for f in [pool.submit(_copy_frames, mm, a, b, chunk_frames) for a, b in ranges]:
            f.result()
    return ranges[-1][1]
