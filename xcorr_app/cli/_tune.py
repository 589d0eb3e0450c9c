"""``xcorr tune``: measure the planner's likeliest kernels for a list of problems and cache the
choices (what ``XCORR_TUNE=1`` does on first sight of a problem, ahead of time).

By default the planner answers from its cost model without running anything; a tuned choice,
once cached (``tuning.json`` in ``$XCORR_CACHE_DIR``), is used instead by every later run on
this GPU with this code, for any batch size the model does not object to.
"""

from __future__ import annotations

import itertools
import time

import click

from ..errors import InputError, XcorrError
from ._main import OnceCommand
from ._options import MAX_SHIFT

__all__ = ["tune_cmd", "tune_problems"]

FORMS = ("one_to_many", "n_to_mn", "n_to_m", "one_to_one")


def tune_problems(frames, sizes, max_shifts, form) -> list:
    """The :class:`xcorr_app.bench.Problem` list of the options (every combination).

    ``one_to_many``: one reference and ``frames`` frames (``xcorr align``'s fixed reference);
    ``n_to_mn``: ``frames`` pairs (``reference="previous"``); ``n_to_m``: ``frames`` by
    ``frames``; ``one_to_one``: one pair.

    Examples
    --------
    >>> [p.name for p in tune_problems((64,), ((512, 512),), (16, None), "one_to_many")]
    ['one_to_many 1x64 at 512x512, max_shift 16', 'one_to_many 1x64 at 512x512, full']
    """
    from ..bench import Problem

    out = []
    for n, (h, w), bound in itertools.product(frames, sizes, max_shifts):
        n_left, m = {"one_to_many": (1, n), "n_to_mn": (n, 1), "n_to_m": (n, n),
                     "one_to_one": (1, 1)}[form]
        count = "" if form == "one_to_one" else f"{n_left}x{m} at "
        bound_text = "full" if bound is None else f"max_shift {bound}"
        out.append(Problem(f"{form} {count}{h}x{w}, {bound_text}", form, n_left, m, (h, w),
                           bound))
    return out


def _max_shift(text):
    return None if str(text).lower() in ("none", "full") else MAX_SHIFT.convert(text, None, None)


@click.command(name="tune", cls=OnceCommand)
@click.option("--frames", type=click.IntRange(min=1), multiple=True,
              help="Frames per problem (repeat for several)  [default: 64].")
@click.option("--size", "sizes", metavar="H|HxW", multiple=True,
              help="Frame size (repeat for several)  [default: 1024x1024].")
@click.option("--max-shift", "max_shifts", metavar="N|SY,SX|none", multiple=True,
              help="Search range (repeat for several; none: every shift)  [default: none].")
@click.option("--form", type=click.Choice(FORMS), default="one_to_many", show_default=True,
              help="one_to_many: one reference and the frames (align's fixed reference); "
                   "n_to_mn: frame pairs (reference previous).")
@click.option("--bench", "bench_problems", is_flag=True,
              help="The problems of xcorr bench xcorr instead.")
@click.option("--again", is_flag=True, help="Measure again even where a choice is cached.")
def tune_cmd(frames, sizes, max_shifts, form, bench_problems, again):
    """Measure the planner's likeliest kernels for these problems and cache the choices.

    For each problem the candidates are measured in the cost model's order, on at most 16
    frames (more only for small frames), for at most 2 s; the fastest is cached and used by
    later runs on this GPU (any batch size). Without this, or XCORR_TUNE=1, the planner
    chooses from its cost model without measuring.

    Example: xcorr tune --frames 64 --size 1024x1024 --max-shift 8 --max-shift 16
    """
    from .. import backend
    from ..bench import PROBLEMS, free_gpu_memory, make_inputs, parse_size
    from ..correlate import cache_path, decide, heuristic

    if bench_problems and (frames or sizes or max_shifts):
        raise InputError("--bench takes the problems of xcorr bench xcorr: leave out --frames, "
                         "--size and --max-shift")
    if bench_problems:
        problems = list(PROBLEMS)
    else:
        problems = tune_problems(frames or (64,), [parse_size(s) for s in sizes or ("1024",)],
                                 [_max_shift(s) for s in max_shifts or ("none",)], form)
    if not backend.gpu_available():
        raise XcorrError(f"xcorr tune needs a GPU: {backend.gpu_unavailable_reason()}")
    for prob in problems:
        left, right = make_inputs(prob)
        model = heuristic(prob.layout(), prob.max_shift)[0][0]
        t0 = time.perf_counter()
        d = decide(left, right, prob.form, prob.max_shift, refresh=again, tune=True)
        took = time.perf_counter() - t0
        best = f" {d.timings[0][1]:.4g} ms" if d.timings and d.source != "heuristic" else ""
        click.echo(f"{prob.name}: {d.plan}{best} ({d.source}, {took:.2f} s; cost model: "
                   f"{'the same' if model == d.plan else model})")
        del left, right
        free_gpu_memory()
    click.echo(f"cached in {cache_path()}")
