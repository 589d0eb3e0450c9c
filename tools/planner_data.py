"""Calibration data for the planner's cost model: every candidate plan timed on the GPU.

What it measures: with CUDA events (one run, then the median of 5 for candidates within 4x of
the best so far), every candidate plan of the planner (both stages: every first-stage candidate,
then the work distributions of the five fastest warp-shuffle variants) on the ``xcorr bench
xcorr`` problems and on the align pipeline's shapes (one reference and 16 or 64 frames of
512x512, 1024x1024 and 2048x2048 at max_shift 4, 8, 16 and 32; ``n_to_mn`` 64x1 at 1024x1024,
bound 16).  Writes JSON after every problem (a run cut short keeps what it measured): the
device's attributes and, per problem, its form, shapes, bound and ``[[plan, ms], ...]``.
``tools/planner_fit.py`` fits the cost model's coefficients to it.

Kernels are compiled first by a pool of processes into CuPy's kernel cache (NVRTC is the slow
part of a fresh machine), then loaded from there by the timing process.  The planner's
candidates and kernel families are its subject, so this tool imports the planner's private
modules; ``--list`` (no GPU needed) checks that they are still there.

Usage::

    python3 tools/planner_data.py [--budget SECONDS] [--only TEXT] [--json PATH] [--list]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

#: kernel families of the correlation plans (module, attribute)
FAMILIES = (("xcorr_app.correlate._overlap", "OVERLAP"),
            ("xcorr_app.correlate._warp_shuffle", "WARP_SHUFFLE"),
            ("xcorr_app.correlate._warp_shuffle", "WARP_SHUFFLE_BLOCK"),
            ("xcorr_app.correlate._warp_shuffle", "WARP_PER_SHIFT"),
            ("xcorr_app.correlate._tiled", "TILED"),
            ("xcorr_app.correlate._tiled", "PAIR_TILED"),
            ("xcorr_app.correlate._tiled", "ARRANGE_RIGHTS"),
            ("xcorr_app.correlate._mma", "MMA"),
            ("xcorr_app.correlate._small", "SMALL"))
#: a candidate whose first run is this much slower than the best is timed once only
REJECT = 4.0
#: wall seconds per problem after which its remaining candidates are skipped
PROBLEM_BUDGET = 25.0


def _family(module, name):
    import importlib

    return getattr(importlib.import_module(module), name, None)


def _compile(jobs):
    done = 0
    for module, name, args in jobs:
        fam = _family(module, name)
        try:
            fam.get(*args)
            done += 1
        except Exception:  # noqa: BLE001 - reported by the timing process if it matters
            pass
    return done


def precompile(workers=14):
    jobs = []
    for module, name in FAMILIES:
        fam = _family(module, name)
        if fam is None:
            print(f"no family {module}.{name}", flush=True)
            continue
        jobs += [(module, name, args) for args in fam.instantiations]
    chunks = [jobs[k::workers] for k in range(workers)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        n = sum(pool.map(_compile, chunks))
    print(f"precompiled {n}/{len(jobs)} instantiations in {time.perf_counter() - t0:.1f} s",
          flush=True)


def problems():
    from xcorr_app.bench._xcorr import PROBLEMS

    out = [dict(name=p.name, form=p.form, shapes=p.shapes(), max_shift=p.max_shift,
                group="bench") for p in PROBLEMS]
    for side in (512, 1024, 2048):
        for n in (16, 64):
            for bound in (4, 8, 16, 32):
                out.append(dict(name=f"align one_to_many 1x{n} at {side}x{side}, max_shift "
                                     f"{bound}", form="one_to_many",
                                shapes=((side, side), (n, side, side)), max_shift=bound,
                                group="align"))
    out.append(dict(name="align n_to_mn 64x1 at 1024x1024, max_shift 16", form="n_to_mn",
                    shapes=((64, 1024, 1024), (64, 1, 1024, 1024)), max_shift=16,
                    group="align"))
    return out


def device_info():
    import cupy as cp

    d = cp.cuda.Device()
    a = d.attributes
    props = cp.cuda.runtime.getDeviceProperties(d.id)
    return {"name": props["name"].decode() if isinstance(props["name"], bytes)
            else props["name"], "compute_capability": d.compute_capability,
            "sm_count": a["MultiProcessorCount"], "clock_khz": a.get("ClockRate"),
            "memory_clock_khz": a.get("MemoryClockRate"),
            "bus_width": a.get("GlobalMemoryBusWidth"), "l2_bytes": a.get("L2CacheSize")}


def planner_names():
    """The planner's private functions this tool times its candidates with."""
    from xcorr_app._cuda.timing import time_gpu
    from xcorr_app.correlate._forms import form_layout
    from xcorr_app.correlate._planner import candidates, distribution_candidates
    from xcorr_app.correlate._plans import run_plan
    from xcorr_app.correlate._shifts import output_shape

    return time_gpu, form_layout, candidates, distribution_candidates, run_plan, output_shape


def measure_problem(prob, budget):
    import cupy as cp

    time_gpu, form_layout, candidates, distribution_candidates, run_plan, output_shape = \
        planner_names()

    form, bound = prob["form"], prob["max_shift"]
    rs = cp.random.RandomState(0)
    left = rs.standard_normal(prob["shapes"][0], dtype=cp.float32)
    right = rs.standard_normal(prob["shapes"][1], dtype=cp.float32)
    lay = form_layout(form, left.shape, right.shape)
    out = cp.empty(lay.batch_shape + output_shape(lay.left_shape, lay.right_shape, bound),
                   dtype=cp.float32)
    sm = cp.cuda.Device().attributes["MultiProcessorCount"]
    t_start = time.perf_counter()
    timings, errors, skipped = [], [], []

    def measure(plans):
        best = min((t for _, t in timings), default=None)
        for plan in plans:
            if time.perf_counter() - t_start > budget:
                skipped.append(str(plan))
                continue
            run = (lambda p: lambda: run_plan(p, left, right, form, bound, out=out))(plan)
            try:
                first = time_gpu(run, warmup=1, repeat=1)
                if best is None or first <= REJECT * best:
                    ms = time_gpu(run, warmup=0, repeat=5, min_total_ms=3.0)
                else:
                    ms = first
            except Exception as exc:  # noqa: BLE001
                errors.append(f"{plan}: {type(exc).__name__}: {str(exc)[:120]}")
                continue
            timings.append((plan, ms))
            best = ms if best is None else min(best, ms)

    first = candidates(lay, bound)
    first.sort(key=lambda p: p.method != "fft")  # the FFT first: a good early bound
    measure(first)
    shuffles = sorted((t, i, p) for i, (p, t) in enumerate(timings)
                      if p.method == "warp_shuffle")[:5]
    more = []
    for _, _, p in shuffles:
        more += distribution_candidates(p, lay, bound, sm)
    measure(more)
    # the five fastest again, in turns (a drifting host)
    timings.sort(key=lambda pt: pt[1])
    top = timings[:5]
    again = []
    for plan, ms in top:
        run = (lambda p: lambda: run_plan(p, left, right, form, bound, out=out))(plan)
        again.append((plan, min(ms, time_gpu(run, warmup=1, repeat=5, min_total_ms=3.0))))
    timings[:len(top)] = again
    timings.sort(key=lambda pt: pt[1])
    del left, right, out
    cp.get_default_memory_pool().free_all_blocks()
    return {"name": prob["name"], "group": prob["group"], "form": form,
            "left_shape": list(prob["shapes"][0]), "right_shape": list(prob["shapes"][1]),
            "max_shift": bound, "timings": [[str(p), float(t)] for p, t in timings],
            "errors": errors, "skipped": skipped,
            "seconds": round(time.perf_counter() - t_start, 2)}


def list_problems(only):
    """Print the problems and each kernel family's instantiations (no GPU needed)."""
    planner_names()
    for module, name in FAMILIES:
        fam = _family(module, name)
        if fam is None:
            raise SystemExit(f"error: no kernel family {module}.{name}")
        print(f"{module}.{name}: {len(fam.instantiations)} instantiations")
    for prob in problems():
        if not only or only in prob["name"]:
            print(f"{prob['group']:6s} {prob['name']}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=float, default=400.0, help="wall seconds in all")
    ap.add_argument("--only", default=None, help="only problems whose name contains this")
    ap.add_argument("--json", type=Path, default=Path("planner_data.json"),
                    help="where to write (default planner_data.json)")
    ap.add_argument("--no-precompile", action="store_true")
    ap.add_argument("--list", action="store_true", help="list the problems and stop")
    args = ap.parse_args(argv)
    if args.list:
        list_problems(args.only)
        return 0
    from xcorr_app import backend

    if not backend.gpu_available():
        ap.exit(2, f"error: needs a usable GPU: {backend.gpu_unavailable_reason()}\n")
    t0 = time.perf_counter()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    if not args.no_precompile:
        precompile(min(14, max(1, (os.cpu_count() or 2) - 2)))
    data = {"device": device_info(), "problems": []}
    print(json.dumps(data["device"]), flush=True)
    for prob in problems():
        if args.only and args.only not in prob["name"]:
            continue
        left = args.budget - (time.perf_counter() - t0)
        if left < 5:
            print(f"out of time before {prob['name']}", flush=True)
            break
        row = measure_problem(prob, min(PROBLEM_BUDGET, left))
        data["problems"].append(row)
        best = row["timings"][0] if row["timings"] else ["-", float("nan")]
        print(f"{row['name']:<52s} {len(row['timings']):3d} cands {row['seconds']:6.1f} s  "
              f"best {best[0]} {best[1]:.4g} ms  skipped {len(row['skipped'])} "
              f"errors {len(row['errors'])}", flush=True)
        args.json.write_text(json.dumps(data, indent=0))
    print(f"done in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
