"""Fit the planner's cost model (``xcorr_app/correlate/_cost_model.py``) to measured timings.

What it does (CPU only; NumPy and SciPy): reads what ``tools/planner_data.py`` measured on a GPU
(default: ``planner_data_h100.json`` beside this file, the data the shipped model was fitted
to), fits per method family the non-negative coefficients of the model's features by least
squares on relative errors (every candidate weighs the same: :data:`NEAR_WEIGHT`), prints per
problem the plan the model picks among the measured candidates, its measured time and its ratio
to the fastest measured, and (unless ``--dry-run``) writes the coefficients into
``xcorr_app/correlate/data/cost_model.json`` under the device's compute capability (the first
architecture fitted is also the generic fallback; families without data keep theirs).

The few-pair kernel's ``chain`` and ``bytes`` coefficients were set from its graph replays
(``cost_model.json``, ``adjusted``): a refit keeps them and that note.  The model's features
are the planner's private business, so this tool imports its private modules.

Usage::

    python3 tools/planner_fit.py [DATA.json] [--dry-run]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from xcorr_app.correlate._cost_model import (FAMILIES, FEATURES, GENERIC, combine, data_path,
                                              features)
from xcorr_app.correlate._forms import form_layout
from xcorr_app.correlate._plans import Plan
from xcorr_app.correlate._small import WARPS as SMALL_WARPS

#: weight of candidates within 3x of their problem's fastest: more than 1 fits the large align
#: problems at the small ones' expense (docs/kernels.md, the cost model)
NEAR_WEIGHT = 1.0
#: the data the shipped coefficients were fitted to
DEFAULT_DATA = Path(__file__).resolve().parent / "planner_data_h100.json"


def rows_of(data):
    dev = data["device"]
    dev = {**dev, "compute_capability": str(dev["compute_capability"])}
    out = []
    for prob in data["problems"]:
        lay = form_layout(prob["form"], tuple(prob["left_shape"]), tuple(prob["right_shape"]))
        best = prob["timings"][0][1]
        for spec, ms in prob["timings"]:
            plan = Plan.parse(spec)
            if plan.method == "small" and plan.row_splits not in SMALL_WARPS:
                continue  # a variant the planner no longer offers
            fam, x = features(plan, lay, prob["max_shift"], dev)
            out.append((prob["name"], fam, plan, x, ms, best))
    return dev, out


def fit(rows):
    """Per family, the non-negative coefficients by least squares on relative errors."""
    coefs = {}
    for fam in FAMILIES:
        sel = [r for r in rows if r[1] == fam]
        if not sel:
            continue
        X = np.array([r[3] for r in sel])
        y = np.array([r[4] for r in sel])
        w = np.array([(NEAR_WEIGHT if r[4] <= 3 * r[5] else 1.0) / r[4] for r in sel])
        c, _ = nnls(X * w[:, None], y * w)
        coefs[fam] = [float(f"{v:.6g}") for v in c]
    return coefs


def evaluate(rows, coefs, echo=print):
    by_problem = {}
    for name, fam, plan, x, ms, best in rows:
        by_problem.setdefault(name, []).append((combine(coefs[fam], x), ms, plan, best))
    worst = 0.0
    for name, cands in by_problem.items():
        pred, ms, plan, best = min(cands, key=lambda c: c[0])
        ratio = ms / best
        worst = max(worst, ratio)
        fastest = min(cands, key=lambda c: c[1])[2]
        echo(f"{name:<52s} {ratio:5.2f}  model {str(plan):<58s} {ms:8.4g} ms (pred "
             f"{pred:8.4g})  fastest {fastest}")
    echo(f"worst ratio {worst:.3f} over {len(by_problem)} problems")
    return worst


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--dry-run", action="store_true", help="fit and evaluate, write nothing")
    args = ap.parse_args(argv)
    try:
        data = json.loads(args.data.read_text())
    except (OSError, ValueError) as exc:
        ap.exit(2, f"error: cannot read {args.data}: {exc}\n")
    dev, rows = rows_of(data)
    coefs = fit(rows)
    for fam, c in coefs.items():
        print(f"{fam:<15s} " + "  ".join(f"{n}={v:.4g}" for n, v in zip(FEATURES, c)))
    evaluate(rows, coefs)
    if args.dry_run:
        return 0
    path = data_path()
    try:
        model = json.loads(path.read_text())
    except (OSError, ValueError):
        model = {"format": 1, "features": list(FEATURES), "architectures": {}}
    cc = dev["compute_capability"]
    # families the data does not cover (the analytic few-pair kernel) keep their coefficients
    kept = model["architectures"].get(cc, {}).get("coefficients", {})
    coefs = {**{f: c for f, c in kept.items() if f not in coefs}, **coefs}
    adjusted = model["architectures"].get(cc, {}).get("adjusted")
    if adjusted and "small" in coefs:  # the few-pair kernel's, set from its graph replays
        coefs["small"] = kept.get("small", coefs["small"])
        print(f"kept the few-pair kernel's coefficients (adjusted: {adjusted[:60]}...)")
    model["architectures"][cc] = {
        "device": dev["name"], "sm_count": dev["sm_count"],
        "fitted": datetime.date.today().isoformat(),
        "source": f"tools/planner_fit.py {args.data.name}", "coefficients": coefs}
    if adjusted:
        model["architectures"][cc]["adjusted"] = adjusted
    model.setdefault(GENERIC, cc)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(model, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
