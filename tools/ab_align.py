"""In-process A/B of ``xcorr_app.align`` on one stack: the median of warm runs per setting.

What it measures: the wall time of whole ``xcorr_app.align(STACK, ...)`` calls inside one Python
process, after one untimed call per setting (kernels built, plans made, the file in the page
cache), for the ``xcorr_app`` that this Python imports.  To compare two trees, run it once with
each on ``PYTHONPATH`` (``PYTHONPATH=/tmp/old python3 tools/ab_align.py ...``; a tree of another
commit: ``git worktree add /tmp/old REV``).

A SETTING is ``none`` (the unbounded search) or a bound such as ``16`` (``max_shift=16``),
optionally followed by ``,noverify`` (``16,noverify``: without the FFT check).  One line a
setting: the median, frames/s and every run.

Usage::

    python3 tools/ab_align.py STACK.tif [SETTING ...] [--device gpu|cpu|auto] [--repeat 3]

A stack to time: ``xcorr bench align --keep --workdir DIR`` leaves the benchmark's stack in DIR.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def parse_setting(text):
    """``(max_shift, verify)`` of one SETTING (module docstring)."""
    bound, _, extra = text.partition(",")
    if extra not in ("", "noverify"):
        raise ValueError(f"setting {text!r}: after the comma only 'noverify' is known")
    if bound == "none":
        return None, extra != "noverify"
    if not bound.isdigit() or int(bound) < 1:
        raise ValueError(f"setting {text!r}: the bound is 'none' or a positive integer")
    return int(bound), extra != "noverify"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stack", help="a TIFF file or folder of TIFFs")
    ap.add_argument("settings", nargs="*", default=["none", "16"],
                    help="none | N [,noverify] (default: none 16)")
    ap.add_argument("--device", default="gpu", choices=("gpu", "cpu", "auto"))
    ap.add_argument("--repeat", type=int, default=3, help="timed runs a setting (default 3)")
    args = ap.parse_args(argv)
    try:
        settings = [(text, *parse_setting(text)) for text in args.settings]
        if args.repeat < 1:
            raise ValueError("--repeat must be at least 1")
    except ValueError as exc:
        ap.exit(2, f"error: {exc}\n")

    from xcorr_app import InputError, XcorrError, align

    for text, bound, verify in settings:
        kw = dict(device=args.device, max_shift=bound, verify=verify)
        try:
            res = align(args.stack, **kw)  # the warm-up
        except (InputError, XcorrError) as exc:
            ap.exit(2, f"error: {exc}\n")
        runs = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            align(args.stack, **kw)
            runs.append(time.perf_counter() - t)
        med = statistics.median(runs)
        print(f"{text}: median {med:.3f} s, {len(res.shifts) / med:.1f} frames/s "
              f"(device {args.device}), runs {[round(r, 3) for r in runs]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
