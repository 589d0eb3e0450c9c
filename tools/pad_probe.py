"""Development probe (device): ``zero_padded`` (``fft_pad`` of ``correlate/cuda/fft_steps.cu``)
on a ``--patches`` chunk's planes, 256 of 512x512 padded to 540x540, four elements a thread
against one: CUDA events, 3 warm-up launches, the median of 20.

    python3 tools/pad_probe.py
"""
import statistics

import cupy as cp
import numpy as np

from xcorr_app.correlate import _fft

a = cp.random.default_rng(0).standard_normal((256, 512, 512), dtype=cp.float32)
out = cp.empty((256, 540, 540), cp.float32)


def launch(v):
    idx, scalar = _fft._INDEX[False]
    _fft._launch(_fft.FFT_PAD, (idx, v), out.size // v,
                 (a, np.int32(512), np.int32(512), np.int32(540), np.int32(540),
                  scalar(out.size // v), out))


for v in (1, 4):
    for _ in range(3):
        launch(v)
    times = []
    for _ in range(20):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record()
        launch(v)
        e.record()
        e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e))
    med = statistics.median(times)
    gb = (a.nbytes + out.nbytes) / 1e9
    print(f"fft_pad V={v}: {med:.4f} ms a launch of 256 ({gb / med:.2f} TB/s)")
