"""Development probe (device, issue 27): is the GPU run deterministic?  The GPU-resident run of
``test_gpu_resident_run_overlaps_and_matches_deciding_first`` three times deciding first and
three times overlapped: the largest |difference| of the shifts between every pair of runs, and
the correlation plan each used.  Equal plans and first-vs-first differences of the same size as
first-vs-overlapped mean float order (the correlation kernels add partial sums with atomicAdd),
not the overlap.

    python3 tools/overlap_probe.py
"""
import itertools

import cupy as cp
import numpy as np

from xcorr_app import align
from xcorr_app.alignment import _api, _template
from xcorr_app.bench._accuracy_data import make_stack

_orig = _template.passes_table
for kind, reference in (("plain", None), ("low_light", None), ("low_light", "refined")):
    stack = cp.asarray(make_stack(kind, 0).frames)
    runs = {}
    for overlap in (False, True):
        for r in range(3):
            seen = {}

            def spy(*a, overlap=overlap, **kw):
                seen["out"] = _orig(*a, **kw, overlap=overlap)
                return seen["out"]

            _api.passes_table = spy
            res = align(stack, device="gpu", chunk_frames=8, reference=reference, max_shift=14,
                        verify=False)
            table, plan = seen["out"][0], seen["out"][1]
            runs[(overlap, r)] = (np.asarray(res.shifts), np.asarray(table), repr(plan)[:120])
    _api.passes_table = _orig
    print(f"== {kind} reference={reference}: plans {sorted(set(v[2] for v in runs.values()))}")
    for a, b in itertools.combinations(sorted(runs), 2):
        d = np.nanmax(np.abs(runs[a][0] - runs[b][0]))
        t = np.nanmax(np.abs(runs[a][1] - runs[b][1]))
        print(f"  {a} vs {b}: shifts {d:.3g} px, table {t:.3g}")
