"""Development probe (device): with ``XCORR_COMPILE_LOG_DIR`` set and this folder on PYTHONPATH,
every Python process (the run and its prebuild helpers) logs each NVRTC compilation CuPy makes:
wall-clock start, seconds, kernel, process -- one file per process in that folder, written at exit.
``tools/device_cold26.sh`` merges them into a timeline.  (It imports CuPy in every such process.)"""
import os

if os.environ.get("XCORR_COMPILE_LOG_DIR"):
    import atexit
    import re
    import sys
    import time

    _start = time.time()
    _log = []
    try:
        import cupy.cuda.compiler as _cc
    except ImportError:
        _cc = None
    if _cc is not None:
        _orig = _cc._compile_using_nvrtc_no_warning

        def _logged(source, *args, **kwargs):
            t = time.time()
            try:
                return _orig(source, *args, **kwargs)
            finally:
                names = re.findall(r"__global__\s+void\s+(\w+)", source)
                _log.append((t, time.time() - t, ",".join(names)[:70]))

        _cc._compile_using_nvrtc_no_warning = _logged

    @atexit.register
    def _write():
        arg = sys.argv[-1] if sys.argv else ""
        who = "main"
        if '"stage"' in arg:
            m = re.search(r'"stage": "(\w+)"', arg)
            who = "helper-" + (m.group(1) if m else "?")
        path = os.path.join(os.environ["XCORR_COMPILE_LOG_DIR"], f"compiles-{os.getpid()}.txt")
        with open(path, "w") as f:
            f.write(f"{_start:.3f} 0 {who} START\n")
            for t, d, name in _log:
                f.write(f"{t:.3f} {d:.3f} {who} {name}\n")
            f.write(f"{time.time():.3f} 0 {who} END\n")
