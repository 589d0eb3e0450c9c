"""Development probe (device): where a one-shot `xcorr` process's wall time goes, thread by
thread (issue 26). Runs the CLI in this process with a sampling thread that reads every
thread's stack each 5 ms (`sys._current_frames`; a round weighed by the time since the
previous one, as it waits for the GIL), then prints, per thread, the wall seconds spent under
each function (the innermost frame of xcorr_app, or of the library it is in when
none), and the main thread's timeline in 100 ms steps.

    python3 tools/wall_sampler.py align STACK --out DIR --force -q --no-aligned
"""
import collections
import os
import sys
import threading
import time

T0 = time.perf_counter()
PERIOD = 0.005
samples = []  # (t, thread name, label, seconds since the previous round)
stop = threading.Event()


def label(frame):
    """The innermost frame of xcorr_app (file:function), else the innermost frame's module."""
    inner = frame
    f = frame
    while f is not None:
        name = f.f_code.co_filename
        if "xcorr_app" in name:
            short = name.split("xcorr_app/")[-1]
            return f"{short}:{f.f_code.co_name}"
        f = f.f_back
    name = inner.f_code.co_filename
    return f"[{os.path.basename(os.path.dirname(name))}/{os.path.basename(name)}:" \
           f"{inner.f_code.co_name}]"


def sampler():
    names = {}
    last = time.perf_counter() - T0
    while not stop.is_set():
        t = time.perf_counter() - T0
        dt, last = t - last, t  # a round waits for the GIL: weigh it by the time it covers
        for ident, frame in sys._current_frames().items():
            if ident == threading.get_ident():
                continue
            if ident not in names:
                names.update({th.ident: th.name for th in threading.enumerate()})
            samples.append((t, names.get(ident, str(ident)), label(frame), dt))
        time.sleep(PERIOD)


def report(total):
    by_thread = collections.defaultdict(collections.Counter)
    for _, th, lab, dt in samples:
        by_thread[th][lab] += dt
    print(f"wall_sampler: {total:.2f} s from the interpreter's start to the CLI's return",
          file=sys.stderr)
    for th, counts in by_thread.items():
        print(f"-- thread {th}: {sum(counts.values()):.2f} s sampled", file=sys.stderr)
        for lab, s in counts.most_common(12):
            print(f"   {s:6.2f} s  {lab}", file=sys.stderr)
    main = [(t, lab) for t, th, lab, _ in samples if th == "MainThread"]
    print("-- main thread, 100 ms steps (the most sampled label of each step)", file=sys.stderr)
    step = collections.defaultdict(collections.Counter)
    for t, lab in main:
        step[int(t * 10)][lab] += 1
    last = None
    for k in sorted(step):
        lab = step[k].most_common(1)[0][0]
        if lab != last:
            print(f"   {k / 10:5.1f} s  {lab}", file=sys.stderr)
            last = lab


def main():
    threading.Thread(target=sampler, daemon=True, name="sampler").start()
    from xcorr_app.cli._main import cli

    try:
        cli.main(args=sys.argv[1:], prog_name="xcorr", standalone_mode=False)
    except SystemExit:
        pass
    total = time.perf_counter() - T0
    stop.set()
    report(total)


if __name__ == "__main__":
    main()
