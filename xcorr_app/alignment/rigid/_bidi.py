"""The line offset of a bidirectional scan (``bidi``): estimated from a few frames, removed as
the frames are read.

Resonant two-photon microscopes scan every other line backwards; where the two directions do
not meet, the odd rows of every frame lie a fixed distance along x from the even rows (suite2p:
``do_bidiphase``).  :func:`estimate_bidi` measures that distance on one image (the mean of a
few frames spread over the stack: :func:`decide_bidi`), subpixel, by comparing every odd row
with the mean of its two even neighbours (so that vertical structure does not lean on it);
:func:`correct_bidi` moves the odd rows back by linear interpolation along x (the even rows
untouched); :class:`BidiSource` is a frame source whose frames are read corrected, what a run
and its aligned output read (:func:`bidi_source`).

Examples
--------
>>> import numpy as np
>>> y, x = np.mgrid[:64, :130]
>>> scene = np.sin(x / 5.0) * np.cos(y / 7.0) + np.sin((x + 2 * y) / 9.0)
>>> raw = scene[:, :128].copy()
>>> raw[1::2] = scene[1::2, 1:129]  # odd rows 1 px to the left
>>> offset, error = estimate_bidi(raw)
>>> round(offset, 2), error < 0.01
(-1.0, True)
>>> fixed = correct_bidi(raw, round(offset, 2))
>>> bool(np.allclose(fixed[:, 2:-2], scene[:, 2:126], atol=1e-6)), fixed.dtype
(True, dtype('float64'))
"""

from __future__ import annotations

import numbers

import numpy as np

from ... import backend
from ...errors import InputError
from ...streaming import WrappedSource
from ._preprocess import spread_frames

#: the largest line offset (pixels) a run corrects, given or estimated
MAX_BIDI = 16.0
#: ``bidi="auto"`` corrects an offset only from this size (pixels): below it the estimate of a
#: stack scanned one way is noise (a few hundredths of a pixel on noisy test stacks), and the
#: stack is read as it is
BIDI_THRESHOLD = 0.1
#: ... and only where the bands of rows agree on it: the standard error of the bands' offsets
#: at most this share of the offset
BIDI_AGREEMENT = 0.25
#: frames spread over the stack the offset is estimated on (their cross-spectra summed: one
#: frame's noise is a few hundredths of a pixel's error at a peak SNR of 10)
BIDI_SAMPLES = 32
#: bands of rows whose offsets are compared (:func:`estimate_bidi`'s error)
BIDI_BANDS = 8


def parse_bidi(value):
    """``bidi`` as a run takes it: ``"auto"``, ``"off"`` or a finite offset in pixels within
    :data:`MAX_BIDI` (a number, or a string holding one: the command line's); else
    :class:`InputError`.

    >>> parse_bidi("off"), parse_bidi("0.7"), parse_bidi(-2)
    ('off', 0.7, -2.0)
    >>> parse_bidi("abc")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    xcorr_app.errors.InputError: bidi must be auto, off or a line offset in pixels ..., got 'abc'
    """
    if isinstance(value, str) and value.strip().lower() in ("auto", "off"):
        return value.strip().lower()
    number = None
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
    elif isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        number = float(value)
    if number is None or not np.isfinite(number) or abs(number) > MAX_BIDI:
        raise InputError(f"bidi must be auto, off or a line offset in pixels from "
                         f"-{MAX_BIDI:g} to {MAX_BIDI:g}, got {value!r}")
    return number + 0.0  # (-0.0 is 0.0)


def _rows(frames):
    """Every odd row with a row below it, and the mean of its two even neighbours, of every
    frame of ``frames`` (``(..., H, W)``): float64, each row's mean removed, ``(rows, W)``."""
    img = np.asarray(backend.to_numpy(frames), np.float64)
    h, w = img.shape[-2:]
    img = img.reshape(-1, h, w)
    odd = img[:, 1:h - 1:2].reshape(-1, w)
    neighbours = 0.5 * (img[:, 0:h - 2:2] + img[:, 2:h:2]).reshape(-1, w)
    return (odd - odd.mean(axis=1, keepdims=True),
            neighbours - neighbours.mean(axis=1, keepdims=True))


def _slope(cross, freqs):
    """The offset of the summed cross-spectrum ``cross`` about 0 (within half a pixel): the
    slope of its phase, fitted weighted by its magnitude."""
    weight = np.abs(cross)
    denom = (weight * freqs ** 2).sum()
    return -(weight * freqs * np.angle(cross)).sum() / (2 * np.pi * denom) if denom > 0 \
        else float("nan")


def _cross(odd, neighbours, d, win):
    """The cross-spectra along x of the odd rows and their neighbours moved by ``d`` (a
    Fourier phase ramp), both windowed after the move: the window's pull towards 0 is
    proportional to the offset left, so moving by the estimate and measuring again converges
    on the offset itself."""
    w = odd.shape[-1]
    freqs = np.fft.rfftfreq(w)
    moved = np.fft.irfft(np.fft.rfft(neighbours, axis=1) * np.exp(-2j * np.pi * freqs * d),
                         n=w, axis=1)
    return np.fft.rfft(odd * win, axis=1) * np.conj(np.fft.rfft(moved * win, axis=1))


def _refined(odd, neighbours, start, win, steps=4):
    """The offset of ``odd`` against ``neighbours`` from ``start``: moved by the estimate and
    measured again, ``steps`` times."""
    freqs = np.fft.rfftfreq(odd.shape[-1])
    d = float(start)
    for _ in range(steps):
        r = _slope(_cross(odd, neighbours, d, win).sum(axis=0), freqs)
        if not np.isfinite(r):
            return float("nan")
        d += float(np.clip(r, -0.5, 0.5))
    return d


def estimate_bidi(frames, max_offset=MAX_BIDI):
    """``(offset, error)``: how far (pixels, subpixel) the odd rows of ``frames`` lie to the
    right of their even rows (``odd[x] = even[x - offset]``), and the standard error of that
    offset over :data:`BIDI_BANDS` bands of rows (NaN where there are too few).

    Each odd row of each frame is compared with the mean of its two even neighbours: their
    cross-spectra along x, summed over the rows and frames, give the integer offset at their
    correlation peak (within ``max_offset`` and a quarter of the width), and the slope of their
    phase the subpixel one, measured again after moving the neighbours by it until it stays.

    Parameters
    ----------
    frames : (H, W) or (N, H, W) array
        One image or a few frames (NumPy or CuPy), at least 3 rows and 8 columns (else
        ``(0.0, nan)``).
    max_offset : float
        The largest offset looked for.

    Returns
    -------
    offset, error : float

    Examples
    --------
    >>> import numpy as np
    >>> x = np.arange(64)
    >>> stripes = np.sin(2 * np.pi * x / 16)[None].repeat(32, axis=0)
    >>> stripes[1::2] = np.sin(2 * np.pi * (x - 0.5) / 16)
    >>> round(estimate_bidi(stripes)[0], 3)
    0.5
    """
    h, w = np.shape(frames)[-2:]
    if h < 3 or w < 8:
        return 0.0, float("nan")
    odd, neighbours = _rows(frames)
    win = np.hanning(w + 2)[1:-1]
    cross = _cross(odd, neighbours, 0.0, win).sum(axis=0)
    corr = np.fft.irfft(cross, n=w)
    reach = int(min(max_offset, w // 4))
    lags = np.r_[0:reach + 1, -reach:0]
    start = int(lags[np.argmax(corr[lags])])
    offset = _refined(odd, neighbours, start, win)
    per_frame = (h - 1) // 2
    bands = min(BIDI_BANDS, per_frame // 4)
    if bands < 2 or not np.isfinite(offset):
        return offset, float("nan")
    # (bands of rows of every frame: row k of a frame in band k * bands // per_frame)
    band = (np.arange(len(odd)) % per_frame) * bands // per_frame
    parts = [_refined(odd[band == b], neighbours[band == b], offset, win, steps=2)
             for b in range(bands)]
    return offset, float(np.std(parts, ddof=1) / np.sqrt(bands))


def decide_bidi(spec, src):
    """``(offset, note)``: the line offset a run corrects for ``bidi=spec`` on the open source
    ``src``: 0.0 for ``"off"``, the offset given, or with ``"auto"`` the offset of the mean of
    :data:`BIDI_SAMPLES` frames spread over the stack (:func:`estimate_bidi`), rounded to
    0.01 px, where it is at least :data:`BIDI_THRESHOLD` and the bands of rows agree on it
    (else 0.0: the stack is read as it is).  ``note`` says what was decided and why (None
    for ``"off"``)."""
    if spec == "off":
        return 0.0, None
    if spec != "auto":
        return float(spec), f"bidi {spec:g} px: the odd rows moved back by it along x"
    idx = spread_frames(src.n_frames, BIDI_SAMPLES)
    frames = np.stack([np.asarray(backend.to_numpy(src.read(i, i + 1)[0])) for i in idx])
    if frames.dtype.kind == "f" and not np.isfinite(frames).all():  # (NaN pixels, mask nan's)
        frames = _rows_filled(frames)
    offset, error = estimate_bidi(frames)
    if not np.isfinite(offset) or abs(offset) < BIDI_THRESHOLD:
        return 0.0, None
    if not error <= BIDI_AGREEMENT * abs(offset):
        return 0.0, (f"bidi auto: no line offset corrected (the rows' offsets disagree: "
                     f"{offset:.2f} +- {error:.2f} px)")
    offset = round(float(np.clip(offset, -MAX_BIDI, MAX_BIDI)), 2)
    return offset, (f"bidi auto: the odd rows lay {offset:g} px along x from the even rows "
                    "(a bidirectional scan); moved back before measuring and in the aligned "
                    "stack")


def _rows_filled(frames):
    """``frames`` (K, H, W) float with each row's NaN or infinite pixels interpolated along
    the row from its finite ones (a row of none: its frame's mean, or 0): a fill along x moves
    with the row as the scan does, where one value would put one edge in odd and even rows."""
    out = np.array(frames, np.float64)
    x = np.arange(out.shape[-1])
    for k, r in zip(*np.nonzero(~np.isfinite(out).all(axis=-1))):
        row = out[k, r]
        ok = np.isfinite(row)
        finite = np.isfinite(out[k])
        row[~ok] = np.interp(x[~ok], x[ok], row[ok]) if ok.any() else \
            (float(out[k][finite].mean()) if finite.any() else 0.0)
    return out


def correct_bidi(frames, offset):
    """``frames`` (``(..., H, W)``, NumPy or CuPy) with their odd rows moved by ``-offset``
    along x (linear interpolation, the edge pixels repeated): a new array of their type
    (integers rounded to nearest and clipped), the even rows as they were.

    >>> import numpy as np
    >>> f = np.array([[0, 1, 2, 3], [10, 20, 30, 40]], np.uint8)
    >>> correct_bidi(f, 1.0).tolist(), correct_bidi(f, -0.5).tolist()
    ([[0, 1, 2, 3], [20, 30, 40, 40]], [[0, 1, 2, 3], [10, 15, 25, 35]])
    """
    xp = backend.array_module_of(frames)
    out = frames.copy()
    if not offset:
        return out
    w = frames.shape[-1]
    whole = int(np.floor(offset))
    frac = float(offset - whole)
    x = xp.arange(w)
    left = xp.clip(x + whole, 0, w - 1)
    right = xp.clip(x + whole + 1, 0, w - 1)
    work = xp.float64 if frames.dtype == np.float64 else xp.float32
    odd = frames[..., 1::2, :].astype(work, copy=False)
    moved = odd[..., left] * (1 - frac) + odd[..., right] * frac if frac else odd[..., left]
    if np.dtype(frames.dtype).kind in "iu":
        info = np.iinfo(frames.dtype)
        moved = xp.clip(xp.rint(moved), info.min, info.max)
    out[..., 1::2, :] = moved.astype(frames.dtype, copy=False)
    return out


def bidi_source(src, offset):
    """``src`` read with its line offset removed (:class:`BidiSource`), or ``src`` itself
    where the offset is 0."""
    return BidiSource(src, offset) if offset else src


class BidiSource(WrappedSource):
    """A frame source whose frames are ``src``'s with the line offset ``offset`` removed
    (:func:`correct_bidi`), as every pass of a run, its quality report and its aligned output
    read them.  A file's frames are read and corrected on the host: the GPU's direct reads of
    the file's pages (registered pages) do not apply; a CuPy stack is corrected once on its
    device (a copy: :attr:`stack`).

    >>> import numpy as np
    >>> from xcorr_app.io import ArraySource
    >>> src = BidiSource(ArraySource(np.arange(8, dtype=np.float32).reshape(1, 2, 4)), 1.0)
    >>> src.read(0, 1).tolist(), src.stack is None
    ([[[0.0, 1.0, 2.0, 3.0], [5.0, 6.0, 7.0, 7.0]]], True)
    """

    own = ("_stack",)

    def __init__(self, src, offset):
        super().__init__(src)
        self.offset = float(offset)
        self.stored = None  # (its file's pages are not the frames read)
        self._stack = None

    @property
    def stack(self):
        """The corrected frames on the GPU for a CuPy stack (made at first use), else None:
        the frames are read through :meth:`read`."""
        inner = getattr(self.src, "stack", None)
        if inner is None or not backend.is_cupy_array(inner):
            return None
        if self._stack is None:
            self._stack = correct_bidi(inner, self.offset)
        return self._stack

    def read(self, start, stop, out=None):
        if self.stack is not None:
            frames = self.stack[start:stop]
            if out is None:
                return frames
            out[...] = backend.to_numpy(frames) if isinstance(out, np.ndarray) else frames
            return out
        if out is None:  # (a view of the input, perhaps: corrected into a new array)
            return correct_bidi(self.src.read(start, stop), self.offset)
        self.src.read(start, stop, out=out)
        out[...] = correct_bidi(out, self.offset)
        return out

