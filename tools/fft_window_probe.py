"""The rigid pass's inverse on one device: the conjugate product and irfft2 (the whole plane)
against correlation_window (correlate/_fft_window.py) and variants of its row kernel, for B
spectra of the 540x540 plane a +-14 px search of 512x512 frames pads to.  CUDA events, 3
warm-ups, median of 15.  Usage: python3 tools/fft_window_probe.py [B] [bound]"""

import sys

import cupy as cp
import numpy as np

from xcorr_app._cuda.loader import COMPILE_OPTIONS, include_options, read_source, source_path
from xcorr_app._cuda.timing import time_gpu as timed
from xcorr_app.correlate import _fft_window as fw
from xcorr_app.correlate._fft import (conj_product, fft_geometry, irfft2_unnormalized,
                                      padded_spectra)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    bound = int(sys.argv[2]) if len(sys.argv) > 2 else 14
    geo = fft_geometry((512, 512), (512, 512), (bound, bound))
    size, first, shape = geo.size, geo.first, geo.shape
    rng = cp.random.default_rng(0)
    frames = rng.random((n, 512, 512), dtype=cp.float32)
    ref = frames[0].copy()
    fl = padded_spectra(ref, size)
    fr = padded_spectra(frames, size)
    scale = 1.0 / (size[0] * size[1])
    work = fr.copy()

    def whole():
        work[...] = fr  # (the copy is timed apart below and subtracted)
        conj_product(fl, work, out=work, scale=scale)
        return irfft2_unnormalized(work, size)

    copy_ms = timed(lambda: work.__setitem__(Ellipsis, fr))
    whole_ms = timed(whole) - copy_ms
    pad_ms = timed(lambda: padded_spectra(frames, size))
    got = fw.correlation_window(fl, fr, size, first, shape)
    circ = whole()
    rows = (first[0] + np.arange(shape[0])) % size[0]
    cols = (first[1] + np.arange(shape[1])) % size[1]
    want = circ[:, cp.asarray(rows)[:, None], cp.asarray(cols)[None, :]]
    err = float(cp.abs(got - want).max() / cp.abs(want).max())
    win_ms = timed(lambda: fw.correlation_window(fl, fr, size, first, shape))
    # its two kernels apart
    xm = max(abs(first[1]), abs(first[1] + shape[1] - 1))
    tw_r, groups_r = fw._row_twiddles(size[1], xm, 0)
    ym = max(abs(first[0]), abs(first[0] + shape[0] - 1))
    tw_c = fw._column_steps(size[0], 0)
    h_r = cp.empty((n * size[0], 2 * (2 * xm + 1)), cp.float64)
    out_c = cp.empty((n,) + tuple(shape), cp.float32)
    rows_fn = fw.WINDOW_ROWS.get(fw.ROWS_PER_LANE, fw.PAIRS, fw.STAGE)
    cols_fn = fw.WINDOW_COLUMNS.get(fw.COLUMN_WARPS, fw.MAX_HALF_WIDTH + 1)
    r_ms = timed(lambda: rows_fn((-(-n * size[0] // (32 * fw.ROWS_PER_LANE)),), (32, groups_r), (
        fl, np.int64(0), fr, tw_r, h_r, np.int64(n * size[0]), np.int32(size[0]),
        np.int32(size[1] // 2 + 1), np.int32(xm), np.float32(scale))))
    c_ms = timed(lambda: cols_fn((n,), (32 * fw.COLUMN_WARPS,), (
        h_r, tw_c, out_c, np.int32(size[0]), np.int32(shape[0]), np.int32(shape[1]),
        np.int32(xm), np.int32(first[1]), np.int32(first[0]), np.int32(ym))))
    print(f"window_rows {r_ms:.3f} ms, window_columns {c_ms:.3f} ms")
    print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}: {n} spectra of "
          f"{size[0]}x{size[1] // 2 + 1}, window {shape} from {first}")
    print(f"padded_spectra (pad + rfft2) {pad_ms:.3f} ms; product + irfft2 {whole_ms:.3f} ms; "
          f"correlation_window {win_ms:.3f} ms (max rel. difference {err:.2e})")
    # variants of window_rows: (RB, PAIRS, VT)
    src = read_source(fw.SOURCE)
    variants = [(2, 8, 8)]
    names = [f"window_rows<{a}, {b}, {c}>" for a, b, c in variants]
    mod = cp.RawModule(code=src, options=COMPILE_OPTIONS + include_options(
        source_path(fw.SOURCE)), name_expressions=names)
    fy, fx = size
    wh = fx // 2 + 1
    xmax = max(abs(first[1]), abs(first[1] + shape[1] - 1))
    rows_total = n * fy
    for (rb, pairs, vt), name in zip(variants, names):
        groups = -(-(xmax + 1) // pairs)
        if groups > 4:
            continue
        v = np.arange(wh)[:, None]
        x = np.arange(groups * pairs)[None, :]
        wgt = np.full((wh, 1), 2.0)
        wgt[0] = 1.0
        wgt[-1] = 1.0 if fx % 2 == 0 else 2.0
        tw = wgt * np.exp(2j * np.pi * ((v * x) % fx) / fx)
        tw[:, xmax + 1:] = 0
        tw = cp.asarray(tw.astype(np.complex64))
        h = cp.empty((rows_total, 2 * (2 * xmax + 1)), cp.float64)
        fn = mod.get_function(name)
        args = (fl, np.int64(0), fr, tw, h, np.int64(rows_total), np.int32(fy), np.int32(wh),
                np.int32(xmax), np.float32(scale))
        grid = (-(-rows_total // (32 * rb)),)
        ms = timed(lambda: fn(grid, (32, groups), args))
        print(f"  window_rows<{rb}, {pairs}, {vt}> ({groups} warps a block): {ms:.3f} ms; "
              f"regs {fn.num_regs}")


if __name__ == "__main__":
    main()
