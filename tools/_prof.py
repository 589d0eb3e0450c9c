import cProfile, pstats, time, cupy as cp
from xcorr_app import conv, gpu_winograd, gpu_conv
x = cp.random.standard_normal((16, 128, 28, 28), dtype=cp.float32)
w = cp.random.standard_normal((128, 128, 3, 3), dtype=cp.float32)
for m in ("auto", "im2win", "winograd"):
    conv.conv2d(x, w, method=m)
cp.cuda.Device().synchronize()
for label, fn in [("conv2d auto", lambda: conv.conv2d(x, w)),
                  ("winograd_conv2d", lambda: gpu_winograd.winograd_conv2d(x, w, 0)),
                  ("im2win_conv2d", lambda: gpu_conv.im2win_conv2d(x, w, 1, 0)),
                  ("cp.empty", lambda: cp.empty((16, 128, 26, 26), cp.float32)),
                  ("ascontiguousarray", lambda: cp.ascontiguousarray(x, dtype=cp.float32))]:
    t = time.perf_counter()
    for _ in range(300):
        fn()
    print(f"{label}: {(time.perf_counter() - t) / 300 * 1e6:.1f} us/call", flush=True)
    cp.cuda.Device().synchronize()
pr = cProfile.Profile(); pr.enable()
for _ in range(300):
    conv.conv2d(x, w)
pr.disable(); cp.cuda.Device().synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(18)
