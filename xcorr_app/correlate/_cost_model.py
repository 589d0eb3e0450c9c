"""The planner's cost model: a predicted time for every candidate plan, without running anything.

Like cuDNN's heuristic mode, :func:`predict` gives each plan a time in milliseconds from the
problem's features and a few coefficients per method family, fitted per GPU architecture to
measurements (``tools/planner_data.py`` measures, ``tools/planner_fit.py`` fits) and shipped
in ``xcorr_app/correlate/data/cost_model.json``.  The features of a plan are (the
:data:`FEATURES`, each in milliseconds of an idealised device so that the coefficients are
dimensionless rates and carry over between GPUs of one architecture):

``launch``
    1: the host's fixed cost of a call (Python, the launch);
``extra``
    launches beyond the first (a zeroed output for atomics, the rearrangement of the right
    matrices of the lane-per-pair kernel);
``work``
    the multiply-adds the kernel does, padding of its tiles and lanes included (for the FFT:
    ``n log2 n`` of every transform), over SMs x clock;
``overhead``
    ``work`` times the variant's instructions per multiply-add beyond the FMA (shuffles,
    loads: from its tile parameters);
``chain``
    the longest serial chain of one warp (multiply-adds of one task) times the waves of
    warps over the GPU (warps / (SMs x :data:`RESIDENT_WARPS`), rounded up), over the clock:
    what dominates when a problem has too few warps to fill the GPU;
``bytes``
    bytes read and written (inputs, outputs; the FFT's padded spectra) over the memory
    bandwidth.

The few-pair kernel (``small``) is modelled analytically: its ``chain`` is the cycles of the
busiest SM (:func:`small_cycles`); its ``chain`` and ``bytes`` coefficients come from its GPU
time in graph replays (about 3 times the modelled cycles; ``cost_model.json``'s ``adjusted``
says so), not from the fit, whose one-call timings hide it under the host's time.

A GPU whose compute capability has no coefficients uses :data:`GENERIC` (the features already
scale by its SM count, clock and memory bandwidth, from CuPy's device attributes).

Examples
--------
>>> from xcorr_app.correlate._forms import form_layout
>>> from xcorr_app.correlate._plans import Plan
>>> dev = {"sm_count": 132, "clock_khz": 1980000, "memory_clock_khz": 2619000,
...        "bus_width": 5120, "compute_capability": "90"}
>>> lay = form_layout("one_to_many", (32, 32), (256, 32, 32))
>>> fam, x = features(Plan("mma", tile_y=2, tile_x=8), lay, None, dev)
>>> fam, len(x) == len(FEATURES)
('mma', True)
>>> predict(Plan("fft"), lay, None, dev) > 0
True
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np

from ._fft import fft_geometry
from ._shifts import axis_overlaps, first_shift, output_shape
from ._work_distribution import MAX_BLOCK_WARPS, schedule

__all__ = ["FEATURES", "FAMILIES", "GENERIC", "RESIDENT_WARPS", "features", "predict", "rank",
           "combine",
           "useful_macs", "small_cycles", "coefficients", "device_attributes", "data_path",
           "model_info"]

FEATURES = ("launch", "extra", "work", "loads_a", "loads_b", "atomics", "partials", "chain",
            "bytes")
#: method families, each with its own coefficients
FAMILIES = ("fft", "overlap", "warp_per_shift", "warp_shuffle", "tiled", "pair_tiled", "mma",
            "small")
#: the architecture whose coefficients serve a GPU without its own
GENERIC = "generic"
#: warps resident on one SM that the ``chain`` feature's waves count
RESIDENT_WARPS = 32
#: the data file (package data)
DATA_FILE = "cost_model.json"


def data_path() -> Path:
    """The shipped coefficients: ``xcorr_app/correlate/data/cost_model.json``."""
    return Path(__file__).resolve().parent / "data" / DATA_FILE


@functools.lru_cache(maxsize=1)
def _data() -> dict:
    try:
        return json.loads(data_path().read_text())
    except (OSError, ValueError):
        return {"architectures": {}}


def model_info(compute_capability) -> str:
    """Which coefficients serve this compute capability (``"90"``), in words."""
    archs = _data().get("architectures", {})
    cc = str(compute_capability)
    if cc in archs:
        return f"cost model of sm_{cc} ({archs[cc].get('device', '?')})"
    return f"generic cost model (no coefficients for sm_{cc})"


def coefficients(compute_capability) -> dict:
    """``{family: [coefficient per feature]}`` of this compute capability (``"90"``), else the
    generic set; a family without coefficients gets a neutral set."""
    data = _data()
    archs = data.get("architectures", {})
    arch = archs.get(str(compute_capability)) or archs.get(data.get(GENERIC, ""), {})
    coefs = arch.get("coefficients", {})
    neutral = [0.01, 0.003] + [1.0] * 7
    return {f: list(coefs.get(f, neutral)) for f in FAMILIES}


def device_attributes() -> dict:
    """The current CUDA device's attributes the features need (CuPy)."""
    import cupy as cp

    d = cp.cuda.Device()
    a = d.attributes
    # an attribute CuPy cannot read (a driver without it) falls back to an H100's
    return {"sm_count": int(a.get("MultiProcessorCount") or 132),
            "clock_khz": int(a.get("ClockRate") or 1980000),
            "memory_clock_khz": int(a.get("MemoryClockRate") or 2619000),
            "bus_width": int(a.get("GlobalMemoryBusWidth") or 5120),
            "compute_capability": str(d.compute_capability)}


def useful_macs(lay, max_shift) -> int:
    """Multiply-adds of the definition (no padding): ``n_results * sum rows(ky) * sum cols(kx)``.
    """
    (lh, lw), (rh, rw) = lay.left_shape, lay.right_shape
    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    ky0, kx0 = first_shift(lay.left_shape, lay.right_shape, max_shift)
    rows = int(axis_overlaps(lh, rh, ky0, ho).sum())
    cols = int(axis_overlaps(lw, rw, kx0, wo).sum())
    return lay.n_results * rows * cols


def _up(a, b):
    return -(-a // b)


def _kernel_terms(plan, lay, max_shift):
    """``(padded work, (load ratio a, load ratio b), partial sums, serial chain, warps, extra
    launches)`` of a direct plan (the ratios: instructions per multiply-add beyond the FMA that
    scale with the variant's parameters; partial sums: results written by atomics or added in
    shared memory, beyond one store per output)."""
    (lh, lw), (rh, rw) = lay.left_shape, lay.right_shape
    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    ky0, _ = first_shift(lay.left_shape, lay.right_shape, max_shift)
    n_left, m, n_res = lay.n_left, max(1, lay.m), lay.n_results
    outputs = n_res * ho * wo
    p = plan
    if p.method == "overlap":
        return useful_macs(lay, max_shift), (2.0, 0.0), (0, 0), min(lh, rh) * min(lw, rw), \
            _up(outputs, 32), 0
    if p.method == "warp_per_shift":
        per = _up(min(lh, rh) * min(lw, rw), 32) * 32
        return outputs * per, (1.0 - 0.5 * p.shared, 1.0), (0, outputs * 5), per // 32 + 5, \
            outputs, 0
    if p.method == "warp_shuffle":
        L, R, S, Rl = p.lefts, p.rights, p.shifts, p.left_rows
        sched = schedule(p.distribution, lh, rh, ky0, ho, S, p.rows_per_worker)
        lengths = sched.domain_length
        longest = int(lengths.max()) if len(lengths) else 0
        many_lefts = lay.form == "n_to_m"
        groups = (_up(n_left, L) if many_lefts else n_left) * _up(m, R)
        pairs = groups * (L if many_lefts else 1) * R
        cols = 32 * _up(rw, 32)
        work = int(lengths.sum()) * S * 32 * _up(wo, 32) * cols * pairs
        if p.distribution in ("rectangle", "triangle"):  # a task sums whole slabs of rows
            slab = _up(p.rows_per_worker, Rl) * Rl
            work = work * slab // max(1, min(p.rows_per_worker, longest or 1))
        ratios = (2.0 / (R * S), (S + Rl - 1) / (L * S * Rl))
        if p.distribution == "none":
            rows, parts = longest, (0, 0)
        elif p.distribution == "block":
            rows = _up(longest, max(1, min(MAX_BLOCK_WARPS, sched.max_tasks)))
            parts = (0, outputs * sched.max_tasks)
        else:
            rows = min(longest, p.rows_per_worker)
            parts = (outputs * sched.n_workers / max(1, sched.n_groups), 0)
        warps = sched.n_workers * _up(wo, 32) * groups
        extra = 1 if p.distribution in ("rectangle", "triangle") else 0
        return work, ratios, parts, rows * cols * L * R * S, warps, extra
    if p.method == "tiled":
        ty, tx, R = p.tile_y, p.tile_x, p.rights
        chunks = _up(rh, p.rows_per_chunk) if p.rows_per_chunk else 1
        rows = p.rows_per_chunk or rh
        tiles = _up(ho, ty) * _up(wo, tx)
        mats = n_left * _up(m, R)
        work = tiles * ty * tx * 32 * _up(rw, 32) * rh * mats * R
        warps = tiles * _up(rw, 32) * mats * chunks
        return work, (1.0 / (ty * R), 1.0 / (ty * tx)), (outputs * chunks * _up(rw, 32), 0), \
            rows * ty * tx * R, warps, 1
    if p.method == "pair_tiled":
        ty, tx = p.tile_y, p.tile_x
        chunks = _up(rh, p.rows_per_chunk) if p.rows_per_chunk else 1
        rows = p.rows_per_chunk or rh
        tiles = _up(ho, ty) * _up(wo, tx)
        work = tiles * ty * tx * rh * (4 * _up(rw, 4)) * n_left * _up(m, 32) * 32
        warps = tiles * _up(m, 32) * n_left * chunks
        return work, (1.0 / (4 * ty * tx), 1.0 / (4 * tx)), \
            (outputs * chunks if p.rows_per_chunk else 0, 0), rows * 4 * _up(rw, 4) * ty * tx, \
            warps, 1 + (1 if p.rows_per_chunk else 0)
    if p.method == "mma":
        ty, tx, ks = p.tile_y, p.tile_x, p.row_splits
        tiles = _up(ho, ty) * _up(wo, tx)
        groups = n_left * _up(m, 16)
        work = tiles * ty * tx * 8 * _up(rw, 8) * rh * groups * 16
        warps = tiles * groups * ks
        chain = _up(rh, ks) * _up(rw, 8) * ty * tx * 4
        return work, (8.0 / (ty * tx), 1.0 / ty), (0, outputs * ks if ks > 1 else 0), chain, \
            warps, 0
    raise ValueError(f"no cost model for method {p.method!r}")


def _small_tiles(lay, max_shift, ty):
    """Per tile row and per tile column of the few-pair kernel: the right rows and the
    column quads its block stages (``n_rows`` and ``n_quads`` of
    ``kernels/correlate/small_xcorr.cu``)."""
    (lh, lw), (rh, rw) = lay.left_shape, lay.right_shape
    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    ky0, kx0 = first_shift(lay.left_shape, lay.right_shape, max_shift)
    ky = ky0 + ty * np.arange(_up(ho, ty))
    rows = np.minimum(rh, lh - ky) - np.maximum(0, -(ky + ty - 1))
    kx = kx0 + 32 * np.arange(_up(wo, 32))
    x_begin = np.maximum(0, -(kx + 31)) & ~3
    cols = np.minimum(rw, lw - kx) - x_begin
    return np.maximum(rows, 0), np.where(cols > 0, (cols + 3) // 4, 0)


#: an SM's cycles a few-pair block takes beyond its sums and staging (its barriers and the
#: warps' wait for the staging): the value that ranks the measured graph replays as measured
#: and changes no other choice among the bench's problems (docs/kernels.md, measurements)
BLOCK_BUSY_CYCLES = 700


def small_cycles(plan, lay, max_shift, sm_count) -> tuple:
    """``(lane FMAs, cycles of the busiest SM)`` of a few-pair plan, from the kernel's loops.

    Per block: the staging (an L2 round trip, then about 16 instructions per staged float
    and warp), the sums and the reduction.  The sums take per warp and quad of columns
    ``4 * tile_y + 5`` instructions per right row (4 FMAs per y-shift; 4 left loads and one
    right float4 from shared memory) and 4 loads per row of the window's start; they are
    bound by the SM's 4 schedulers, by its shared-memory pipe (one warp-wide load a cycle)
    or by a warp's own instructions (its sums have independent chains: ``tile_y`` of them, or 4
    per sum below 4).  The blocks of every result share the SMs, each taking
    :data:`BLOCK_BUSY_CYCLES` of its SM's time besides its sums and staging."""
    ty, warps = plan.tile_y, max(1, plan.row_splits)
    rows, quads = _small_tiles(lay, max_shift, ty)
    rows, quads = rows[:, None], quads[None, :]  # blocks: tile rows x tile columns
    live = (rows > 0) & (quads > 0)
    rows, quads = np.where(live, rows, 0), np.where(live, quads, 0)
    chunk = _up(rows, warps)
    active = np.where(chunk > 0, _up(rows, np.maximum(chunk, 1)), 0)
    per_step = 4 * ty + 5
    warp_cycles = quads * (chunk * per_step + 4 * (ty - 1))
    issue = quads * (rows * per_step + active * 4 * (ty - 1))
    loads = quads * (rows * 5 + active * 4 * (ty - 1))
    sums = np.maximum(loads, issue / 4)
    staged = rows * 4 * quads + np.where(live, rows + ty - 1, 0) * (4 * quads + 31)
    stage_issue = staged * 16 / 32
    block = 600 + stage_issue / min(4, warps) + np.maximum(warp_cycles, sums) + 100 + 8 * warps
    busy = np.where(live, sums + stage_issue / 4 + BLOCK_BUSY_CYCLES, 0)
    n = lay.n_results
    cycles = max(float(block.max()), float(busy.sum()) * n / sm_count)
    return int((quads * rows).sum()) * 4 * ty * 32 * n, cycles


def features(plan, lay, max_shift, dev) -> tuple:
    """``(family, feature vector)`` of ``plan`` on a problem (a
    :class:`~xcorr_app.correlate._forms.FormLayout` and its ``max_shift``) and a device
    (:func:`device_attributes`); pure arithmetic, no GPU."""
    sm = int(dev["sm_count"])
    ghz = dev["clock_khz"] / 1e6
    bandwidth = dev["memory_clock_khz"] * 1e3 * 2 * dev["bus_width"] / 8  # bytes/s
    per_ms = sm * ghz * 1e6  # multiply-adds per ms of one FMA per SM per clock
    (lh, lw), (rh, rw) = lay.left_shape, lay.right_shape
    ho, wo = output_shape(lay.left_shape, lay.right_shape, max_shift)
    io_bytes = 4 * (lay.n_left * lh * lw + lay.n_right * rh * rw + lay.n_results * ho * wo)
    if plan.method == "fft":
        geo = fft_geometry(lay.left_shape, lay.right_shape, max_shift)
        n = geo.size[0] * geo.size[1]
        transforms = lay.n_left + lay.n_right + lay.n_results
        spectra = 8 * geo.size[0] * (geo.size[1] // 2 + 1) * transforms
        work = transforms * n * math.log2(max(n, 2)) / per_ms
        x = [1.0, 0.0, work, spectra / 8 / per_ms, 0.0, 0.0, 0.0, 0.0,
             (io_bytes + 3 * spectra) / bandwidth * 1e3]
        return "fft", np.array(x)
    if plan.method == "small":
        work, cycles = small_cycles(plan, lay, max_shift, sm)
        x = [1.0, 0.0, work / per_ms, 0.0, 0.0, 0.0, 0.0, cycles / (ghz * 1e6),
             io_bytes / bandwidth * 1e3]
        return "small", np.array(x)
    work, (ratio_a, ratio_b), (atomics, parts), chain, warps, extra = _kernel_terms(
        plan, lay, max_shift)
    waves = _up(max(1, warps), sm * RESIDENT_WARPS)
    x = [1.0, float(extra), work / per_ms, work * ratio_a / per_ms, work * ratio_b / per_ms,
         atomics / per_ms, parts / per_ms, chain * waves / (ghz * 1e6), io_bytes / bandwidth * 1e3]
    return plan.method, np.array(x)


def predict(plan, lay, max_shift, dev, coefs=None) -> float:
    """Predicted milliseconds of ``plan`` (``coefs``: :func:`coefficients` of the device's
    compute capability by default)."""
    coefs = coefs or coefficients(dev.get("compute_capability", ""))
    family, x = features(plan, lay, max_shift, dev)
    return combine(coefs[family], x)


def combine(coefs, x) -> float:
    """The model's time from coefficients and features: their dot product (a fit of the
    larger of the host's part and the device's, as the two overlap, ranked worse on the
    calibration data: small problems then tie at the host's cost)."""
    return float(np.dot(coefs, x))


def rank(plans, lay, max_shift, dev, coefs=None) -> list:
    """``[(plan, predicted ms)]``, fastest first (ties keep the order of ``plans``)."""
    coefs = coefs or coefficients(dev.get("compute_capability", ""))
    scored = [(predict(p, lay, max_shift, dev, coefs), i, p) for i, p in enumerate(plans)]
    scored.sort(key=lambda t: (t[0], t[1]))
    return [(p, t) for t, _, p in scored]
