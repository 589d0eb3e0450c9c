"""Plans: one concrete way to compute a cross-correlation, and how to run it.

A :class:`Plan` names a method and, for the warp-shuffle kernels, its parameters.  Its string
form is what ``cross_correlate(..., method=...)`` accepts and what ``xcorr bench --explain`` and
the planner's cache show::

    fft
    overlap
    warp_per_shift:shared=1
    warp_shuffle:rights=4,shifts=2,distribution=triangle,rows_per_worker=8
    tiled:tile_y=8,rights=2,rows_per_chunk=64
    pair_tiled:tile_y=8,tile_x=8
    band
    mma:tile_y=2,tile_x=32
    mma:tile_y=2,tile_x=8,row_splits=4
    small:tile_y=8,row_splits=16

Examples
--------
>>> p = Plan.parse("warp_shuffle:rights=4,distribution=rectangle,rows_per_worker=8")
>>> p.rights, p.distribution, str(p)
(4, 'rectangle', 'warp_shuffle:rights=4,distribution=rectangle,rows_per_worker=8')
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace

import numpy as np

from ..errors import InputError
from ._work_distribution import DISTRIBUTIONS

#: methods a plan may name; ``direct`` and ``fft`` run on either array module
METHODS = ("direct", "fft", "overlap", "warp_shuffle", "warp_per_shift", "tiled", "pair_tiled",
           "mma", "small", "band")
#: the methods of the GPU's kernels (:func:`gpu_function`)
GPU_METHODS = ("overlap", "warp_shuffle", "warp_per_shift", "tiled", "pair_tiled", "mma", "small",
               "band")


def gpu_function(method):
    """A GPU method's ``configure`` function for :func:`xcorr_app.correlate._warp_shuffle.launch`
    (whose parameters are the plan's, named as in ``_PARAMS``), or its launcher (``overlap``, no
    parameters); imported at first use, so a run imports only its own kernels' modules."""
    if method == "overlap":
        from ._overlap import overlap_xcorr
        return overlap_xcorr
    if method in ("warp_shuffle", "warp_per_shift"):
        from ._warp_shuffle import configure_per_shift, configure_shuffle
        return configure_shuffle if method == "warp_shuffle" else configure_per_shift
    if method in ("tiled", "pair_tiled"):
        from ._tiled import configure_pairs, configure_tiled
        return configure_tiled if method == "tiled" else configure_pairs
    if method == "mma":
        from ._mma import configure_mma
        return configure_mma
    if method == "small":
        from ._small import configure_small
        return configure_small
    if method == "band":
        from ._band import configure_band
        return configure_band
    raise ValueError(f"{method!r} is not a GPU method")
_PARAMS = {"warp_shuffle": ("lefts", "rights", "shifts", "left_rows", "distribution",
                            "rows_per_worker"),
           "warp_per_shift": ("shared",),
           "tiled": ("tile_y", "tile_x", "rights", "rows_per_chunk"),
           "pair_tiled": ("tile_y", "tile_x", "rows_per_chunk"),
           "mma": ("tile_y", "tile_x", "row_splits"),
           "small": ("tile_y", "row_splits")}  # row_splits: the block's warps


@dataclass(frozen=True)
class Plan:
    """A method and its parameters (defaults: the simplest variant)."""

    method: str
    lefts: int = 1
    rights: int = 1
    shifts: int = 1
    left_rows: int = 1
    distribution: str = "none"
    rows_per_worker: int = 0
    shared: int = 0
    tile_y: int = 4
    tile_x: int = 4
    rows_per_chunk: int = 0
    row_splits: int = 1

    def __post_init__(self):
        if self.method not in METHODS:
            raise InputError(f"unknown method {self.method!r}; use 'auto' or one of "
                             f"{', '.join(METHODS)} (parameters as in "
                             "'warp_shuffle:rights=4,shifts=2')")
        if self.distribution not in DISTRIBUTIONS:
            raise InputError(f"unknown distribution {self.distribution!r}; use one of "
                             f"{', '.join(DISTRIBUTIONS)}")
        if self.distribution != "none" and self.rows_per_worker < 1:
            object.__setattr__(self, "rows_per_worker", 8)

    def __str__(self) -> str:
        defaults = Plan("fft")
        parts = [f"{name}={getattr(self, name)}" for name in _PARAMS.get(self.method, ())
                 if getattr(self, name) != getattr(defaults, name)]
        return self.method + (":" + ",".join(parts) if parts else "")

    @classmethod
    def parse(cls, spec) -> "Plan":
        """A plan from its string form (or a Plan, returned as is)."""
        if isinstance(spec, Plan):
            return spec
        method, _, params = str(spec).strip().partition(":")
        plan = cls(method.strip())
        if not params.strip():
            return plan
        allowed = _PARAMS.get(plan.method, ())
        types = {f.name: f.type for f in fields(cls)}
        values = {}
        for item in params.split(","):
            key, eq, value = (s.strip() for s in item.partition("="))
            if not eq or key not in allowed:
                raise InputError(f"bad parameter {item.strip()!r} in method {spec!r}; "
                                 f"{plan.method} takes {', '.join(allowed) or 'no parameters'}")
            try:
                values[key] = value if types[key] in (str, "str") else int(value)
            except ValueError:
                raise InputError(f"parameter {key} of method {spec!r} must be an integer, "
                                 f"got {value!r}") from None
        return replace(plan, **values)

    @property
    def on_gpu_only(self) -> bool:
        return self.method in GPU_METHODS

    @functools.cached_property
    def gpu_launcher(self):
        """``run(left, right, form, max_shift, out)`` of a GPU plan, made once per plan object:
        the launch of the method's ``configure`` with the plan's parameters, with no wrapper in
        between (a small problem's run is a few microseconds of host time: the layers would be
        a fair share of it)."""
        fn = gpu_function(self.method)
        if self.method == "overlap":
            return lambda left, right, form, max_shift, out: fn(left, right, form, max_shift,
                                                                out=out)
        from ._warp_shuffle import launch

        params = self.kernel_params
        return lambda left, right, form, max_shift, out: launch(fn, left, right, form,
                                                                max_shift, out, params)

    @property
    def kernel_params(self) -> tuple:
        """``((name, value), ...)``: the parameters the method's ``configure`` takes."""
        return tuple((key, getattr(self, key)) for key in _PARAMS.get(self.method, ()))

    def prepared(self, form, left_shape, right_shape, max_shift=None):
        """The prepared launches (:class:`xcorr_app.correlate._warp_shuffle.Launch`) of this
        plan's kernel for one problem on the current device, or ``None`` for the plans without
        one (``direct``, ``fft``, ``overlap``): configured once and kept, as a call of
        :meth:`gpu_launcher` keeps them.  A plan that cannot run the problem raises
        :class:`~xcorr_app.errors.InputError` saying why."""
        if self.method not in GPU_METHODS or self.method == "overlap":
            return None
        configure = gpu_function(self.method)
        from ._warp_shuffle import prepare

        try:
            return prepare(configure, form, left_shape, right_shape, max_shift,
                           self.kernel_params)
        except ValueError as exc:
            raise InputError(f"method {self}: {exc}") from None


def run_plan(plan, left, right, form="one_to_one", max_shift=None, out=None):
    """Execute ``plan`` on arrays of one array module (CuPy for the GPU kernels).

    ``direct`` and ``fft`` return float32 arrays of the input's module (``fft`` on CuPy arrays:
    :func:`xcorr_app.correlate._fft.fft_xcorr`); ``out`` receives the result.
    """
    plan = Plan.parse(plan)
    if plan.method in GPU_METHODS:
        try:
            return plan.gpu_launcher(left, right, form, max_shift, out)
        except ValueError as exc:
            raise InputError(f"method {plan}: {exc}") from None
    from ..backend import array_module_of
    from ._fft import fft_xcorr, xcorr_fft
    from ._direct import xcorr_direct

    if plan.method == "fft" and array_module_of(left, right) is not np:
        try:
            return fft_xcorr(left, right, form, max_shift, out=out)
        except ValueError as exc:  # a bad ``out``
            raise InputError(f"method fft: {exc}") from None
    fn = xcorr_fft if plan.method == "fft" else xcorr_direct
    res = fn(left, right, form, max_shift, dtype="float32")
    if out is not None:
        out[...] = res
        return out
    return res
