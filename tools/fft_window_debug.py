"""Debug of correlation_window's two kernels on a small case against NumPy (development)."""
import cupy as cp
import numpy as np

from xcorr_app._cuda.loader import COMPILE_OPTIONS, include_options, read_source, source_path
from xcorr_app.correlate import _fft_window as fw
from xcorr_app.correlate._fft import padded_spectra

rng = np.random.default_rng(0)
size, first, shape = (45, 61), (-4, -3), (9, 7)
a = rng.standard_normal((2, 37, 53)).astype(np.float32)
fl = padded_spectra(cp.asarray(a[:1]), size)
fr = padded_spectra(cp.asarray(a), size)
fy, fx = size
wh = fx // 2 + 1
xmax = 4
Q = (fl.get()[0][None] * np.conj(fr.get())).astype(np.complex128) / (fy * fx)
w = np.full(wh, 2.0); w[0] = 1; w[-1] = 1 if fx % 2 == 0 else 2
xs = np.arange(-xmax, xmax + 1)
H = np.einsum("nuv,vx->nux", Q * w, np.exp(2j * np.pi * np.outer(np.arange(wh), xs) / fx))
src = read_source(fw.SOURCE)
for opts in [(), ("-DWINDOW_PLAIN_LOADS",)]:
    mod = cp.RawModule(code=src, options=COMPILE_OPTIONS + include_options(source_path(fw.SOURCE)) + opts,
                       name_expressions=["window_rows<2, 5, 16>", "window_columns<256, 16>"])
    tw, groups = fw._row_twiddles(fx, xmax, 0)
    h = cp.full((2 * fy, 2 * (2 * xmax + 1)), np.nan, cp.float64)
    mod.get_function("window_rows<2, 5, 16>")(((2 * fy + 63) // 64,), (32, groups),
        (fl, np.int64(0), fr, tw, h, np.int64(2 * fy), np.int32(fy), np.int32(wh), np.int32(xmax), np.float32(1 / (fy * fx))))
    hh = h.get().reshape(2, fy, 2, 2 * xmax + 1)
    got = hh[:, :, 0] + 1j * hh[:, :, 1]
    print(opts, "rows: max err", np.nanmax(np.abs(got - H)), "nan", np.isnan(got).sum(), "max|H|", np.abs(H).max())
    bad = np.argwhere(~(np.abs(got - H) < 1e-4 * np.abs(H).max()))
    print("  first bad", bad[:5].tolist(), "count", len(bad), "of", got.size)
    np.set_printoptions(precision=4, linewidth=200)
    print("  got row0", got[0, 0], "\n  want", H[0, 0])
    print("  got row50", got[1, 5], "\n  want", H[1, 5])
    # columns from exact H
    hx = np.stack([H.real, H.imag], 2).reshape(2 * fy, -1)
    tw2 = fw._column_twiddles(fy, first[0], shape[0], 0)
    out = cp.full((2,) + shape, np.nan, cp.float32)
    mod.get_function("window_columns<256, 16>")((2,), (256,), (cp.asarray(hx), tw2, out, np.int32(fy), np.int32(shape[0]), np.int32(shape[1]), np.int32(xmax), np.int32(first[1])))
    ys = first[0] + np.arange(shape[0])
    want = np.real(np.einsum("yu,nux->nyx", np.exp(2j * np.pi * np.outer(ys, np.arange(fy)) / fy), H))[:, :, xmax + first[1]: xmax + first[1] + shape[1]]
    print("  columns: max err", np.nanmax(np.abs(out.get() - want)), "max", np.abs(want).max())
