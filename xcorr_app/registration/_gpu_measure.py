"""The GPU measurement of the align pipeline: correlation surfaces to peaks with few passes.

For ZNCC (or mean-subtracted sums) against one reference, what depends only on the reference
is made once per run: its summed-area tables and, for the FFT plan, its zero-padded spectrum.
Per batch of frames: their summed-area tables, the correlation (the planner's kernel, or one
batched ``rfft2``, an in-place conjugate product and one ``irfft2``, left un-cropped), and
:func:`xcorr_app.registration._surfaces.surface_peaks`, which normalizes, crops, writes the surface and
finds the peaks and confidences in two passes.

Examples
--------
>>> import cupy as cp  # doctest: +SKIP
>>> from xcorr_app.correlate._plans import Plan  # doctest: +SKIP
>>> frames = cp.random.default_rng(0).random((3, 64, 80), dtype=cp.float32)  # doctest: +SKIP
>>> g = GpuSurfaces((64, 80), (32, 40), "zncc")  # doctest: +SKIP
>>> z, iy, ix, peak, conf = g(frames[0], frames, Plan("fft"), None)  # doctest: +SKIP
>>> (iy - 32).tolist(), (ix - 40).tolist()  # doctest: +SKIP
([0, 0, 0], [0, 0, 0])
"""

from __future__ import annotations

from ._fft_register import cross_power
from ._surfaces import summed_area_tables, surface_peaks
from ..correlate._reference import _fft_setup
from ..correlate._shifts import first_shift


class GpuSurfaces:
    """ZNCC (``normalization="zncc"``) or raw (``"none"``) surfaces and their peaks for a run.

    Parameters
    ----------
    frame_shape : (H, W)
        Shape of the reference and of every frame.
    bound : (int, int)
        Search range ``-bound..bound`` (the surface is ``(2 by + 1, 2 bx + 1)``, clipped to
        the overlapping shifts).
    normalization : {"zncc", "none"}
    """

    def __init__(self, frame_shape, bound, normalization):
        import cupy as cp

        self.shape = tuple(frame_shape)
        self.normalize = normalization == "zncc"
        self.k0 = first_shift(self.shape, self.shape, bound)
        self.bound_rows = int(bound[0])  # the tables keep the rows this search looks up
        # the FFT path's alias-free size and surface shape (un-cropped: the kernel crops)
        self.fft_size, _, _, _, self.surface = _fft_setup(cp, self.shape, self.shape, bound)
        self._left = None  # (reference array, its tables, its padded spectrum)

    def _left_data(self, ref, fft):
        import cupy as cp

        if self._left is not None and self._left[0] is ref:
            return self._left[1:]
        left = ref if ref.ndim == 3 else ref[None]
        tables = summed_area_tables(left, bound_rows=self.bound_rows) if self.normalize else None
        spectrum = cp.fft.rfft2(left, s=self.fft_size) if fft else None
        if ref.ndim == 2:
            # one reference for the whole run, read by both streams of the pipeline
            cp.cuda.get_current_stream().synchronize()
            self._left = (ref, tables, spectrum)
        return tables, spectrum

    def __call__(self, ref, mov, plan, correlate):
        """``(z, iy, ix, peak, conf)`` of ``mov`` (N, H, W) against ``ref`` ((H, W) or one per
        frame); ``correlate()`` gives the dense raw surfaces for plans other than FFT."""
        import cupy as cp

        fft = plan.method == "fft"
        left_tables, spectrum = self._left_data(ref, fft)
        right_tables = summed_area_tables(mov, bound_rows=self.bound_rows) \
            if self.normalize else None
        if fft:
            product = cross_power(spectrum, cp.fft.rfft2(mov, s=self.fft_size))
            corr = cp.fft.irfft2(product, s=self.fft_size)  # c[k] at k mod fft_size
        else:
            corr = correlate()
        return surface_peaks(corr, self.shape, self.k0, self.surface, left_tables=left_tables,
                             right_tables=right_tables, circular=fft, normalize=self.normalize)
