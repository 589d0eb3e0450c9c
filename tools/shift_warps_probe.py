"""Development probe (device): the warp-per-shift kernel's warps per block (issue 24), timed as a
pipeline sees it: 200 graph replays of a plan / 200 (CUDA events), for 4 and 8 warps a block,
the right matrix staged in shared memory (with the left one where it fits) and not, on the
pipeline rows of the bench and a few more.

    python3 tools/shift_warps_probe.py
"""
import cupy as cp

from xcorr_app import correlation_plan
from xcorr_app.bench._xcorr_plans import back_to_back
from xcorr_app.correlate import _warp_shuffle

ROWS = [("one_to_one", (16, 16), (16, 16)), ("one_to_one", (32, 32), (32, 32)),
        ("one_to_one", (48, 48), (48, 48)), ("one_to_one", (64, 64), (64, 64)),
        ("one_to_many", (16, 16), (8, 16, 16)), ("one_to_many", (32, 32), (8, 32, 32)),
        ("one_to_one", (24, 40), (24, 40))]


def main():
    for form, ls, rs in ROWS:
        left = cp.random.rand(*ls, dtype=cp.float32)
        right = cp.random.rand(*rs, dtype=cp.float32)
        line = []
        for shared in (1, 0):
            for warps in (4, 8):  # __launch_bounds__(256): 8 at most
                _warp_shuffle.SHIFT_WARPS = warps
                _warp_shuffle._LAUNCHES.clear()
                plan = correlation_plan(ls, rs, form, method=f"warp_per_shift:shared={shared}")
                graph = plan.graph(left, right)
                times = sorted(back_to_back(graph.replay) for _ in range(5))
                line.append(f"s{shared}w{warps} {times[2] * 1e3:5.2f}")
        print(f"{form} {ls} x {rs}: " + "  ".join(line), flush=True)


if __name__ == "__main__":
    main()
