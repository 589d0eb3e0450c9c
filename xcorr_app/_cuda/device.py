"""The current GPU's resource limits, which the kernel planners size their tiles by.

:func:`device_limits` reads the SM count, registers and shared memory of the current device
once (CuPy); without CuPy or a GPU it answers :data:`H100_LIMITS`, so the planners (and their
tests) run anywhere.

Examples
--------
>>> H100_LIMITS.sms, H100_LIMITS.shared_per_block
(132, 232448)
>>> isinstance(device_limits(), Limits)
True
"""

from __future__ import annotations

import dataclasses
import functools


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one GPU offers the kernels: SMs, registers and shared memory (bytes) per SM, and
    the shared memory one block may opt in to."""

    sms: int
    registers_per_sm: int
    shared_per_sm: int
    shared_per_block: int


#: NVIDIA H100 SXM (the CPU default, so the search runs anywhere)
H100_LIMITS = Limits(132, 65536, 233472, 232448)


def device_limits() -> Limits:
    """The current GPU's limits (CuPy), or :data:`H100_LIMITS` without one.

    Returns
    -------
    Limits
        Read once per device (the properties call takes about a millisecond).

    Examples
    --------
    >>> device_limits().sms > 0
    True
    """
    try:
        import cupy

        return _limits_of(cupy.cuda.Device().id)
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: plan for an H100
        return H100_LIMITS


@functools.lru_cache(maxsize=None)
def _limits_of(device_id: int) -> Limits:
    """Read once per device: the properties call takes about a millisecond."""
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(device_id)
        return Limits(props["multiProcessorCount"], props["regsPerMultiprocessor"],
                      props["sharedMemPerMultiprocessor"],
                      props.get("sharedMemPerBlockOptin", props["sharedMemPerBlock"]))
    except Exception:  # noqa: BLE001 - no CuPy or no GPU: plan for an H100
        return H100_LIMITS
