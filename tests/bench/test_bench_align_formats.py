"""``xcorr bench align --formats``: the OME-Zarr and HDF5 files it writes, its ways of reading
them, and a CPU smoke run of the command (a tiny stack, ``--device cpu``)."""

import json

import numpy as np
import pytest

from cli_helpers import xcorr
from xcorr_app.bench import _align_formats as formats
from xcorr_app.bench._align_data import SyntheticStack
from xcorr_app.io import open_source

zarr = pytest.importorskip("zarr")
h5py = pytest.importorskip("h5py")


def test_files_hold_the_stack_a_frame_per_chunk_uncompressed(tmp_path):
    stack = SyntheticStack(5, (64, 72), seed=3)
    files = formats.write_stores(stack, tmp_path, workers=1)
    want = stack.frames(0, 5)
    a = zarr.open_group(str(files["OME-Zarr"][0]), mode="r")["0"]
    assert a.chunks == (1, 64, 72) and not a.compressors
    with h5py.File(files["HDF5"][0], "r") as f:
        ds = f["data"]
        assert ds.chunks == (1, 64, 72) and ds.compression is None
        np.testing.assert_array_equal(ds[:], want)
    np.testing.assert_array_equal(a[:], want)
    for fmt, (path, _) in files.items():  # as xcorr reads them: OME-Zarr's level 0, the dataset
        src = open_source(path)
        try:
            assert src.n_frames == 5 and src.frame_shape == (64, 72)
            assert src.concurrent_reads, fmt  # (each chunk's bytes read by pread)
            np.testing.assert_array_equal(src.read(0, 5), want, err_msg=fmt)
        finally:
            src.close()
        for way in formats.READ_WAYS[fmt]:
            read = formats.read_way(fmt, way)
            assert read(str(path)) == 5 and read(str(path), 2) == 2, (fmt, way)


def test_cpu_smoke_run_prints_the_table(tmp_path):
    out = tmp_path / "formats.json"
    res = xcorr("bench", "align", "--formats", "--frames", 4, "--size", 64, "--device", "cpu",
                "--workdir", tmp_path / "work", "--json", out)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    table = [ln for ln in lines if ln.startswith(("| OME-Zarr |", "| HDF5 |"))]
    assert any("share of the one-shot read (target >= 60%)" in ln for ln in lines)
    assert len([ln for ln in table if "page cache warm" in ln]) == 4
    assert any(ln.startswith("OME-Zarr: one-shot xcorr align") for ln in lines)
    assert "xcorr bench align --formats on CPU" in lines[0] and "UTC" in lines[0]
    doc = json.loads(out.read_text())
    assert [r["format"] for r in doc["rows"]] == ["OME-Zarr", "HDF5"]
    for row in doc["rows"]:
        assert row["read_gbps"] > 0 and row["read_oneshot"]["gbps"] > 0
        assert len(row["reads"]) == 3 and all(r["gbps"] > 0 for r in row["reads"])
        for a in row["aligns"]:
            assert a["status"] == "ok" and a["gbps"] > 0 and a["rms_px"] < 0.25
            assert 0 < a["vs_read_oneshot"] and a["vs_read_in_process"] > 0
    assert list((tmp_path / "work").iterdir()) == []  # the files are removed without --keep


def test_options_it_does_not_take_are_one_line():
    res = xcorr("bench", "align", "--formats", "--patches", "4x4")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--formats takes" in res.stderr


def test_a_run_that_computed_elsewhere_is_found(tmp_path):
    """The GPU rows run ``xcorr align`` without ``--device``, as a user does: each run's
    shifts.json must say it computed on the GPU."""
    outs = []
    for k, where in enumerate(["gpu: NVIDIA H100 80GB HBM3", "cpu", None]):
        out = tmp_path / str(k)
        out.mkdir()
        if where is not None:
            (out / "shifts.json").write_text(json.dumps({"device": where}))
        outs.append(out)
    assert formats._ran_elsewhere(outs[:1], "gpu") == []
    assert formats._ran_elsewhere(outs, "gpu") == ["cpu", "an unknown device"]
    assert formats._ran_elsewhere(outs[1:2], "cpu") == []
