"""The dynamic blocking of the pointwise-convolution paper: choose the tiles of
``kernels/conv/pointwise_conv.cu`` for a problem under the device's limits.

The output of a 1x1 convolution is an ``F x Q`` matrix (``F`` filters, ``Q = N * H * W``
columns).  A block of :data:`WARPS` warps computes a ``block_f x block_p`` tile as 2 x 2 warp
tiles; in a warp, ``c_num`` lanes share one ``thread_f x thread_p`` thread tile and split its
channels (summed at the end by a segmented reduction); the groups of a warp run along the
filters first (layout 1, the paper's L1, chosen when ``F >= 48``) or along the columns (layout
2, L2).  :func:`plan` searches every compiled configuration for ``block_num`` in {2, 4} blocks
per SM, keeps those within the register and shared-memory limits of one of ``block_num``
blocks (read from the device), and picks, among those that give every SM ``block_num``
blocks when any does, the one of highest arithmetic intensity (FMAs per shared-memory load of
the thread tile), then the fewest blocks.

Examples
--------
>>> from xcorr_app._cuda.device import H100_LIMITS
>>> cfg = plan(F=96, C=24, Q=32 * 56 * 56, limits=H100_LIMITS)
>>> cfg.layout, cfg.block_f * cfg.block_p == 128 * cfg.thread_f * cfg.thread_p // cfg.c_num
(1, True)
"""

from __future__ import annotations

import dataclasses
import functools
import math

from .._cuda import Limits, device_limits
from ..errors import InputError, XcorrError

WARPS = 4
THREADS = 32 * WARPS
BLOCK_NUMS = (2, 4)
C_NUMS = (1, 2, 4, 8, 16, 32)
BLOCK_FS = (16, 32, 64, 128)
BLOCK_PS = (32, 64, 128)
L1_MIN_FILTERS = 48
#: registers a thread needs besides its tiles and staging (indices, pointers, loop state)
REGISTER_OVERHEAD = 24
#: within this factor of the best intensity, fewer blocks win
CLOSE = 0.9


@dataclasses.dataclass(frozen=True)
class PointwiseConfig:
    block_f: int
    block_p: int
    thread_f: int
    thread_p: int
    c_num: int
    layout: int

    @property
    def block_k(self) -> int:
        return max(self.c_num, 8)

    @property
    def template(self) -> tuple:
        return (self.block_f, self.block_p, self.thread_f, self.thread_p, self.c_num,
                self.layout)

    def registers(self) -> int:
        """Registers per thread (the paper's R_o + R_f + R_i + staging + const)."""
        staging = self.block_f * self.block_k // THREADS + self.block_k * self.block_p // THREADS
        return (self.thread_f * self.thread_p + self.thread_f + self.thread_p + staging
                + REGISTER_OVERHEAD)

    def shared_bytes(self) -> int:
        """Shared memory per block: two buffers of the filter and input tiles."""
        return 2 * self.block_k * (self.block_f + self.block_p) * 4

    def intensity(self) -> float:
        """FMAs per shared-memory load of the thread tile's outer products."""
        return self.thread_f * self.thread_p / (self.thread_f + self.thread_p)

    def blocks(self, F: int, Q: int) -> int:
        return math.ceil(F / self.block_f) * math.ceil(Q / self.block_p)


def _thread_tile(block_f, block_p, c_num):
    """The most nearly square ``(thread_f, thread_p)`` of powers of two holding
    ``block_f * block_p * c_num / 128`` outputs inside a warp tile, or None."""
    outputs = block_f * block_p * c_num // THREADS
    if outputs < 1 or outputs * THREADS != block_f * block_p * c_num or outputs > 64:
        return None
    best = None
    for tf in (1, 2, 4, 8, 16, 32, 64):
        tp = outputs // tf
        if tf * tp != outputs or tf > block_f // 2 or tp > block_p // 2:
            continue
        if best is None or abs(math.log2(tp / tf)) < abs(math.log2(best[1] / best[0])):
            best = (tf, tp)
    return best


@functools.lru_cache(maxsize=1)
def configurations() -> tuple:
    """Every configuration the kernel is compiled for (the compile check covers them all)."""
    out = []
    for layout in (1, 2):
        for block_f in BLOCK_FS:
            for block_p in BLOCK_PS:
                for c_num in C_NUMS:
                    tile = _thread_tile(block_f, block_p, c_num)
                    if tile is None:
                        continue
                    cfg = PointwiseConfig(block_f, block_p, *tile, c_num, layout)
                    if (cfg.block_f * cfg.block_k) % THREADS or \
                            (cfg.block_k * cfg.block_p) % (4 * THREADS):
                        continue
                    out.append(cfg)
    return tuple(out)


def fits(cfg: PointwiseConfig, block_num: int, limits: Limits) -> bool:
    """Within the paper's Limit_R (registers / (block_num x 128 threads), at most 255) and
    Limit_S (shared memory / block_num)."""
    limit_r = min(255, limits.registers_per_sm // (block_num * THREADS))
    limit_s = min(limits.shared_per_sm // block_num, limits.shared_per_block)
    return cfg.registers() <= limit_r and cfg.shared_bytes() <= limit_s


def plan(F: int, C: int, Q: int, limits: Limits | None = None) -> PointwiseConfig:
    """The configuration for ``F`` filters, ``C`` channels and ``Q`` output columns (searched
    once per problem and device)."""
    if min(F, C, Q) < 1:
        raise InputError(f"pointwise convolution needs F, C, Q >= 1, got {F}, {C}, {Q}")
    return _search(int(F), int(C), int(Q), limits or device_limits())


@functools.lru_cache(maxsize=4096)
def _search(F, C, Q, limits):
    layout = 1 if F >= L1_MIN_FILTERS else 2
    cands = []
    for block_num in BLOCK_NUMS:
        for cfg in configurations():
            if cfg.layout == layout and fits(cfg, block_num, limits):
                cands.append((cfg, block_num))
    if not cands:
        raise XcorrError("no pointwise configuration fits this GPU's limits")
    full = [(c, b) for c, b in cands if c.blocks(F, Q) >= limits.sms * b]
    if full:
        cands = full
    else:  # a small problem: as many blocks as it can make
        most = max(c.blocks(F, Q) for c, _ in cands)
        cands = [(c, b) for c, b in cands if c.blocks(F, Q) == most]
    best = max(c.intensity() for c, _ in cands)
    close = [c for c, _ in cands if c.intensity() >= CLOSE * best]
    return min(close, key=lambda c: (c.blocks(F, Q), -c.intensity(), c.c_num, c.template))


def covered(cfg: PointwiseConfig, F: int, Q: int):
    """Python port of the kernel's index arithmetic: how many times each output ``(f, q)`` is
    written, and each ``(f, q, channel slot)`` is summed (for the tests)."""
    import numpy as np

    writes = np.zeros((F, Q), np.int64)
    gf_n = (cfg.block_f // 2) // cfg.thread_f
    gp_n = (cfg.block_p // 2) // cfg.thread_p
    for by in range(math.ceil(F / cfg.block_f)):
        for bx in range(math.ceil(Q / cfg.block_p)):
            for tid in range(THREADS):
                lane, warp = tid % 32, tid // 32
                group, slot = lane // cfg.c_num, lane % cfg.c_num
                gf = group % gf_n if cfg.layout == 1 else group // gp_n
                gp = group // gf_n if cfg.layout == 1 else group % gp_n
                if slot:
                    continue
                f_t = by * cfg.block_f + (warp >> 1) * (cfg.block_f // 2) + gf * cfg.thread_f
                p_t = bx * cfg.block_p + (warp & 1) * (cfg.block_p // 2) + gp * cfg.thread_p
                fs = slice(f_t, min(f_t + cfg.thread_f, F))
                qs = slice(p_t, min(p_t + cfg.thread_p, Q))
                writes[fs, qs] += 1
    return writes
