"""A Zarr or HDF5 stack larger than ``--max-memory`` is aligned within that memory: the peak
resident memory of ``xcorr align`` on a 40 MiB file exceeds that on a 2 MiB file of the same
frames by less than the 16 MiB given (the file is streamed chunk by chunk, never loaded)."""

import subprocess
import sys

import numpy as np
import pytest

from cli_helpers import ROOT

pytestmark = pytest.mark.slow

#: what the child runs: xcorr, then its peak resident memory (KiB on Linux) on the last line
_PEAK = ("import resource, runpy, sys\n"
         "sys.argv[0] = 'xcorr'\n"
         "try:\n"
         "    runpy.run_module('xcorr_app.cli', run_name='__main__')\n"
         "except SystemExit as e:\n"
         "    assert not e.code, e.code\n"
         "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")


def peak_rss(path, out):
    res = subprocess.run([sys.executable, "-c", _PEAK, "align", str(path), "--device", "cpu",
                          "--max-memory", "16M", "--out", str(out), "--no-aligned",
                          "--no-verify", "--no-quality", "--max-shift", "4", "--quiet"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    return int(res.stdout.strip().splitlines()[-1]) * 1024


@pytest.mark.parametrize("fmt", ["zarr", "hdf5"])
def test_a_file_larger_than_max_memory_is_aligned_within_it(tmp_path, fmt):
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 4000, (320, 256, 256), dtype=np.uint16)  # 40 MiB
    paths = {}
    for n in (16, 320):
        if fmt == "zarr":
            zarr = pytest.importorskip("zarr")
            paths[n] = tmp_path / f"m{n}.zarr"
            zarr.create_array(str(paths[n]), data=frames[:n], chunks=(4, 256, 256))
        else:
            h5py = pytest.importorskip("h5py")
            paths[n] = tmp_path / f"m{n}.h5"
            with h5py.File(paths[n], "w") as f:
                f.create_dataset("data", data=frames[:n], chunks=(4, 256, 256))
    small, big = (peak_rss(paths[n], tmp_path / f"o{n}") for n in (16, 320))
    assert frames.nbytes > 2 * 16 * 2**20
    assert big - small < 16 * 2**20, (small / 2**20, big / 2**20)
