"""Development probe (device): the host-memory costs a chunk ring pays (issue 26): page-locking
3 x 512 MiB (CuPy's pinned allocator) one after another and in 3 threads at once, in pieces of
64 MiB, faulting in fresh ordinary memory, and a 512 MiB copy to the GPU from pinned and from
ordinary memory.

    python3 tools/pin_probe.py
"""
import time
from concurrent.futures import ThreadPoolExecutor

import cupy as cp
import numpy as np

MiB = 2**20


def pin(nbytes):
    mem = cp.cuda.alloc_pinned_memory(nbytes)
    a = np.frombuffer(mem, np.uint8, nbytes)
    return a


def timed(label, fn):
    t = time.perf_counter()
    out = fn()
    print(f"{label:52s} {time.perf_counter() - t:6.3f} s", flush=True)
    return out


def main():
    cp.cuda.runtime.free(0)
    pool = cp.get_default_pinned_memory_pool()
    for rep in range(2):
        keep = timed("pin 3 x 512 MiB, one after another", lambda: [pin(512 * MiB) for _ in range(3)])
        del keep
        pool.free_all_blocks()
        with ThreadPoolExecutor(3) as ex:
            keep = timed("pin 3 x 512 MiB, 3 threads at once",
                         lambda: list(ex.map(pin, [512 * MiB] * 3)))
        del keep
        pool.free_all_blocks()
        keep = timed("pin 24 x 64 MiB, one after another", lambda: [pin(64 * MiB) for _ in range(24)])
        del keep
        pool.free_all_blocks()
        keep = timed("pin 4 x 64 MiB (a ring of pieces)", lambda: [pin(64 * MiB) for _ in range(4)])
        del keep
        pool.free_all_blocks()
        keep = timed("np.ones 3 x 512 MiB (fresh memory faulted in)",
                     lambda: [np.ones(512 * MiB, np.uint8) for _ in range(3)])
        host = keep[0]
        dev = cp.empty(512 * MiB, cp.uint8)
        timed("512 MiB to the GPU from ordinary memory (set)",
              lambda: (dev.set(host), cp.cuda.Device().synchronize()))
        timed("512 MiB to the GPU from ordinary memory, again",
              lambda: (dev.set(host), cp.cuda.Device().synchronize()))
        p = pin(512 * MiB)
        p[:] = 1
        timed("512 MiB to the GPU from pinned memory (set)",
              lambda: (dev.set(p), cp.cuda.Device().synchronize()))
        del keep, host, p, dev
        pool.free_all_blocks()
    t = time.perf_counter()
    keep = [pin(512 * MiB) for _ in range(3)]
    del keep
    t1 = time.perf_counter()
    pool.free_all_blocks()
    print(f"{'free 3 x 512 MiB of pinned memory':52s} {time.perf_counter() - t1:6.3f} s "
          f"(pinned in {t1 - t:.3f})", flush=True)


if __name__ == "__main__":
    main()
