"""Development probe (device): run the ``xcorr`` command line under cProfile and log every NVRTC
compilation CuPy makes in this process (seconds, the kernel, the xcorr function that asked).

    python3 tools/compile_log.py LOG PROFILE align STACK --out DIR ...

Writes LOG (one line per compile, then totals by xcorr function) and PROFILE (pstats text).
"""
import cProfile
import io
import pstats
import re
import sys
import time
import traceback

import cupy.cuda.compiler as cc

log = []
_orig = cc._compile_using_nvrtc_no_warning


def _kernel_name(source, name_expressions):
    if name_expressions:
        return ",".join(name_expressions)[:90]
    m = re.findall(r"__global__\s+void\s+(\w+)", source)
    return ",".join(m)[:90] or source[:60].replace("\n", " ")


def _caller():
    for fr in reversed(traceback.extract_stack()[:-2]):
        if "xcorr_app" in fr.filename:
            return f"{fr.filename.split('xcorr_app/')[-1]}:{fr.lineno}({fr.name})"
    return "?"


def logged(source, *args, **kwargs):
    t = time.perf_counter()
    try:
        return _orig(source, *args, **kwargs)
    finally:
        names = kwargs.get("name_expressions")
        if names is None:  # positional: the one list or tuple of strings, if any
            names = next((a for a in args if isinstance(a, (list, tuple)) and a
                          and all(isinstance(x, str) for x in a) and "<" in "".join(a)), None)
        log.append((time.perf_counter() - t, _kernel_name(source, names), _caller()))


cc._compile_using_nvrtc_no_warning = logged


class _ImportWatch:
    """Logs who first imports a watched module (cupyx.scipy: 0.4 s)."""
    WATCH = ("cupyx.scipy", "cupyx", "scipy", "tifffile", "PIL", "tqdm", "threadpoolctl")

    def find_spec(self, name, path=None, target=None):
        if name in self.WATCH and name not in sys.modules:
            log.append((0.0, f"import {name}", _caller()))
        return None


sys.meta_path.insert(0, _ImportWatch())


def main():
    log_path, prof_path, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    from xcorr_app.cli._main import cli

    prof = cProfile.Profile()
    t0 = time.perf_counter()
    try:
        prof.runcall(cli.main, args=argv, prog_name="xcorr", standalone_mode=False)
    except SystemExit:
        pass
    wall = time.perf_counter() - t0
    with open(log_path, "w") as f:
        f.write(f"wall {wall:.2f} s, {len(log)} compiles, {sum(t for t, _, _ in log):.2f} s\n")
        by = {}
        for t, name, who in log:
            f.write(f"{t:6.3f}  {who:60s} {name}\n")
            by.setdefault(who, [0, 0.0])
            by[who][0] += 1
            by[who][1] += t
        f.write("\nby caller:\n")
        for who, (n, t) in sorted(by.items(), key=lambda kv: -kv[1][1]):
            f.write(f"{t:6.2f} s {n:3d}  {who}\n")
    s = io.StringIO()
    p = pstats.Stats(prof, stream=s)
    p.sort_stats("cumulative").print_stats(60)
    p.sort_stats("tottime").print_stats(30)
    with open(prof_path, "w") as f:
        f.write(s.getvalue())


if __name__ == "__main__":
    main()
