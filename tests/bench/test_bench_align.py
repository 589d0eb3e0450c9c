"""``xcorr bench align``: the synthetic stack, the reads, the report and the options (CPU), and
a quick run (GPU)."""

import json
import os
import shutil

import numpy as np
import pytest
import tifffile

from cli_helpers import xcorr
from xcorr_app import align
from xcorr_app import backend
from xcorr_app.bench import _align as bench
from xcorr_app.bench import _align_data as data
from xcorr_app.bench import _align_peers as peers
from xcorr_app.bench import _align_table as table
from xcorr_app.errors import OutputError, XcorrError
from xcorr_app.io import open_stack


def fake_row(name, kind, seconds, frames=10, frame_bytes=100, shifts=None, truth=None, error=""):
    return table.make_row(name, kind, frames, frame_bytes, seconds, shifts, truth, error=error)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    monkeypatch.setattr(backend, "gpu_unavailable_reason", lambda: "CuPy is not installed")


@pytest.fixture
def fake_gpu(monkeypatch):
    """A "GPU" whose :func:`bench.run` times the reads for real and makes up the GPU rows."""
    calls = []

    def fake_run(stack, path, *, max_memory=None, echo=print, repeat=1):
        calls.append((stack, path, max_memory, os.path.exists(path), repeat))
        fb = stack.shape[0] * stack.shape[1] * 2
        n = stack.n_frames
        rows = bench.read_rows(path, n, fb, echo)
        rows += [table.make_row(name, "xcorr", n, fb, 0.01, stack.shifts + 0.01, stack.shifts)
                 for name in table.ALIGN_ROWS]
        rows.append(table.make_row(table.LOOP, "peer", n, fb, 1.0, np.round(stack.shifts),
                                   stack.shifts))
        rows.append(bench.skimage_row(path, n, fb, stack.shifts, echo))
        return table.summarise(rows)

    monkeypatch.setattr(backend, "gpu_available", lambda: True)
    monkeypatch.setattr(bench, "run", fake_run)
    return calls


# ------------------------------------------------------------------------------ the stack

def test_drift_walk_bounds_and_seed():
    s = data.drift_walk(2000, max_drift=12.0, step=1.0, seed=3)
    assert s.shape == (2000, 2) and s.dtype == np.float64
    assert s[0].tolist() == [0.0, 0.0]
    assert np.abs(s).max() <= 12.0
    assert np.abs(s).max() > 8  # the walk does wander
    assert (np.abs(s - np.round(s)) > 0.05).mean() > 0.5  # subpixel parts
    assert np.abs(np.diff(s, axis=0)).max() < 6
    np.testing.assert_array_equal(s, data.drift_walk(2000, 12.0, 1.0, seed=3))
    assert not np.array_equal(s, data.drift_walk(2000, 12.0, 1.0, seed=4))
    assert data.drift_walk(1).tolist() == [[0.0, 0.0]]


def test_synthetic_stack_shape_dtype_and_range():
    st = data.SyntheticStack(5, (64, 96), seed=2)
    f = st.frames(0, 5)
    assert f.shape == (5, 64, 96) and f.dtype == np.uint16
    assert st.nbytes == f.nbytes
    assert st.shifts.shape == (5, 2) and np.abs(st.shifts).max() <= data.MAX_DRIFT
    assert 1000 < f.std() and f.max() > 40000 and f.min() < 20000
    np.testing.assert_array_equal(f[0], st.frame(0))


def test_synthetic_stack_chunks_equal_whole():
    st = data.SyntheticStack(7, (64, 70), seed=5)
    whole = st.frames(0, 7)
    pieces = np.concatenate([st.frames(0, 3), st.frames(3, 4), st.frames(4, 7)])
    np.testing.assert_array_equal(whole, pieces)
    np.testing.assert_array_equal(whole, st.frames(0, 7, workers=3))
    again = data.SyntheticStack(7, (64, 70), seed=5)
    np.testing.assert_array_equal(whole, again.frames(0, 7))
    assert not np.array_equal(whole, data.SyntheticStack(7, (64, 70), seed=6).frames(0, 7))


def test_noise_is_per_frame():
    """Frames at the same drift differ only by the noise, of about sqrt(value) counts."""
    st = data.SyntheticStack(3, (64, 64), seed=1)
    st.shifts[:] = 0.0
    f = st.frames(0, 3).astype(np.float64)
    d = f[1] - f[2]
    assert np.abs(d).max() > 0
    expected = np.sqrt(2 * f[1:].mean())
    assert 0.7 * expected < d.std() < 1.3 * expected
    quiet = data.SyntheticStack(2, (64, 64), seed=1, noise=False)
    quiet.shifts[:] = 0.0
    np.testing.assert_array_equal(quiet.frame(0), quiet.frame(1))


def test_truth_is_the_shift_to_apply_skimage():
    """skimage's phase_cross_correlation(frame0, frame_i) returns the shift to apply to frame i:
    the truth of the stack."""
    from skimage.registration import phase_cross_correlation

    st = data.SyntheticStack(3, (128, 128), seed=7, step=4.0)
    f = st.frames(0, 3)
    assert np.abs(st.shifts[1:]).max() > 2  # a real drift to measure
    for i in range(3):
        coarse = phase_cross_correlation(f[0], f[i])[0]
        fine = phase_cross_correlation(f[0], f[i], upsample_factor=20)[0]
        assert np.abs(coarse - st.shifts[i]).max() <= 0.6, (i, coarse, st.shifts[i])
        assert np.abs(fine - st.shifts[i]).max() <= 0.35, (i, fine, st.shifts[i])


def test_truth_is_the_shift_to_apply_align_cpu():
    st = data.SyntheticStack(6, (96, 96), seed=8, step=3.0)
    res = align(st.frames(0, 6), max_shift=table.MAX_SHIFT, device="cpu")
    assert data.rms_error(res.shifts, st.shifts) < 0.1
    assert res.agree.all()


def test_rms_error():
    assert data.rms_error([[3.0, 4.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]) == \
        pytest.approx(np.sqrt(12.5))
    assert np.isnan(data.rms_error([[np.nan, 0.0]], [[0.0, 0.0]]))


# ------------------------------------------------------------------------------ file and reads

def test_write_is_memory_mappable_and_reads(tmp_path):
    st = data.SyntheticStack(7, (64, 80), seed=4)
    path = tmp_path / "s.tif"
    st.write(path, chunk_frames=3, workers=2)
    want = st.frames(0, 7)
    np.testing.assert_array_equal(tifffile.memmap(path, mode="r"), want)
    np.testing.assert_array_equal(peers.read_imread(path), want)
    np.testing.assert_array_equal(peers.read_imread(path, range(2)), want[:2])
    with open_stack(path) as src:
        assert src.memory_mapped and src.n_frames == 7
    assert peers.read_memmap_chunks(path, 3) == 7
    assert peers.read_memmap_chunks(path, 3, stop=4) == 4
    assert [p.name for p in tmp_path.iterdir()] == ["s.tif"]  # no temporary file left


def test_read_rows_time_on_the_cpu(tmp_path):
    st = data.SyntheticStack(5, (64, 64))
    path = tmp_path / "s.tif"
    st.write(path)
    lines = []
    rows = bench.read_rows(path, 5, 64 * 64 * 2, lines.append)
    assert [r["name"] for r in rows] == [table.READ_IMREAD, table.READ_MEMMAP]
    for r in rows:
        assert r["kind"] == "read" and not r["error"] and r["seconds"] > 0
        assert r["fps"] == pytest.approx(5 / r["seconds"])
        assert r["gbps"] == pytest.approx(5 * 64 * 64 * 2 / r["seconds"] / 1e9)
        assert r["rms_px"] is None and "untimed" in r["warmup"]
    assert len(lines) == 2 and "warm-up: read frames 0-3" in lines[0]


def test_read_rows_repeat(tmp_path):
    st = data.SyntheticStack(3, (64, 64))
    path = tmp_path / "s.tif"
    st.write(path)
    rows = bench.read_rows(path, 3, 64 * 64 * 2, lambda s: None, repeat=3)
    for r in rows:
        assert len(r["runs"]) == 3 and r["seconds"] == pytest.approx(np.median(r["runs"]))
        assert r["note"].startswith("median of 3 runs (")


def test_skimage_row(tmp_path):
    st = data.SyntheticStack(4, (96, 96), seed=9, step=3.0)
    path = tmp_path / "s.tif"
    st.write(path)
    row = bench.skimage_row(path, 4, 96 * 96 * 2, st.shifts, echo=lambda s: None)
    assert row["name"] == f"{table.SKIMAGE}, 4 frames" and row["frames"] == 4
    assert not row["error"] and row["rms_px"] <= 0.6


def test_failed_row_is_an_error_row():
    def boom():
        raise MemoryError("out of memory allocating 8 GiB")

    row = bench._measure("x", "xcorr", 10, 100, lambda: "", boom)
    assert row["seconds"] is None and row["fps"] is None
    assert row["error"] == "MemoryError: out of memory allocating 8 GiB"
    assert table.summarise([row])[0]["status"] == "ERROR"


def test_disk_space(tmp_path, monkeypatch):
    data.check_disk_space(tmp_path, 1 << 20)
    usage = type("Usage", (), {"free": 1 << 30})
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage)
    with pytest.raises(XcorrError, match=r"not enough free disk space .*4\.25 GiB needed, "
                                         r"1\.00 GiB free"):
        data.check_disk_space(tmp_path, 4 << 30)


def test_filesystem_of(tmp_path):
    assert isinstance(data.filesystem_of(tmp_path), str) and data.filesystem_of(tmp_path)


# ------------------------------------------------------------------------------ the report

def test_summarise_ratios_and_status():
    truth = np.zeros((10, 2))
    rows = table.summarise([
        fake_row(table.READ_IMREAD, "read", 2.0),
        fake_row(table.READ_MEMMAP, "read", 1.0),  # the faster read is the baseline
        fake_row(table.ALIGN_BOUNDED, "xcorr", 1.25, shifts=truth + 0.01, truth=truth),
        fake_row(table.ALIGN_FULL, "xcorr", 2.0, shifts=truth + 0.3, truth=truth),
        fake_row(table.ALIGN_NO_VERIFY, "xcorr", None, error="CUDAOutOfMemoryError: ..."),
        fake_row(table.LOOP, "peer", 8.0, shifts=truth + 0.5, truth=truth),
    ])
    by = {r["name"]: r for r in rows}
    assert by[table.READ_IMREAD]["vs_read"] == pytest.approx(0.5)
    assert by[table.READ_MEMMAP]["vs_read"] == pytest.approx(1.0)
    b = by[table.ALIGN_BOUNDED]
    assert b["vs_read"] == pytest.approx(0.8) and b["vs_loop"] == pytest.approx(6.4)
    assert b["rms_px"] == pytest.approx(0.01 * np.sqrt(2)) and b["status"] == "ok"
    assert by[table.ALIGN_FULL]["status"] == "INACCURATE"
    assert by[table.ALIGN_NO_VERIFY]["status"] == "ERROR"
    assert by[table.ALIGN_NO_VERIFY]["vs_read"] is None
    assert by[table.LOOP]["status"] == "-" and by[table.LOOP]["vs_loop"] == pytest.approx(1.0)
    assert by[table.LOOP]["max_err_px"] == pytest.approx(0.5)


def test_format_table():
    truth = np.zeros((10, 2))
    rows = table.summarise([
        fake_row(table.READ_IMREAD, "read", 1.0, frame_bytes=2 << 20),
        fake_row(table.ALIGN_BOUNDED, "xcorr", 1.25, frame_bytes=2 << 20, shifts=truth + 0.03,
                 truth=truth),
        fake_row(table.ALIGN_NO_VERIFY, "xcorr", None, error="Boom: no"),
        fake_row(table.LOOP, "peer", 8.0, frame_bytes=2 << 20),
    ])
    header = ["xcorr bench align on Test GPU", "stack: ..."]
    lines = table.format_table(rows, header).splitlines()
    assert lines[:2] == header and len(lines) == 2 + 2 + len(rows)
    assert lines[2].startswith("| path | frames | seconds | frames/s | GB/s |")
    assert set(lines[3]) <= set("|- ")
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[4:]]
    assert all(len(c) == len(table.COLUMNS) for c in cells)
    assert cells[0] == [table.READ_IMREAD, "10", "1.000", "10.0", "0.02", "100%", "8.0x", "", "-",
                        ""]
    assert cells[1] == [table.ALIGN_BOUNDED, "10", "1.250", "8.0", "0.02", "80%", "6.4x", "0.042",
                        "ok", ""]
    assert cells[2][2:5] == ["n/a"] * 3 and cells[2][8:] == ["ERROR", "Boom: no"]


def test_target_lines():
    rows = table.summarise([
        fake_row(table.READ_IMREAD, "read", 1.0),
        fake_row(table.ALIGN_BOUNDED, "xcorr", 1.2),   # 83% of the read, 6.7x the loop
        fake_row(table.ALIGN_FULL, "xcorr", 2.0),      # 50%, 4.0x
        fake_row(table.ALIGN_NO_VERIFY, "xcorr", 0.5),  # not a target row
        fake_row(table.LOOP, "peer", 8.0),
    ])
    lines = table.target_lines(rows)
    assert lines == [
        "xcorr align --max-shift 16: end-to-end >= 80% of plain read: yes (83%); "
        ">= 5x the per-pair CuPy loop: yes (6.7x)",
        "xcorr align (unbounded): end-to-end >= 80% of plain read: no (50%); "
        ">= 5x the per-pair CuPy loop: no (4.0x)"]
    no_loop = table.summarise([fake_row(table.READ_IMREAD, "read", 1.0),
                               fake_row(table.ALIGN_BOUNDED, "xcorr", 1.0),
                               fake_row(table.LOOP, "peer", None, error="x")])
    assert table.target_lines(no_loop) == [
        "xcorr align --max-shift 16: end-to-end >= 80% of plain read: yes (100%); "
        ">= 5x the per-pair CuPy loop: n/a"]


# ------------------------------------------------------------------------------ main

def test_main_needs_a_gpu(no_gpu, tmp_path):
    with pytest.raises(XcorrError) as info:
        bench.main(quick=True, workdir=tmp_path)
    msg = str(info.value)
    assert msg == ("xcorr bench align needs a GPU (CuPy is not installed); --device cpu times "
                   "the CPU path against scikit-image")
    assert "\n" not in msg
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize("kwargs,words", [({"frames": 0}, "--frames"),
                                          ({"repeat": 0}, "--repeat must be at least 1"),
                                          ({"size": "48"}, "--size must be at least 64"),
                                          ({"size": "12x"}, "--size takes H or HxW")])
def test_main_bad_options(no_gpu, kwargs, words):
    with pytest.raises(XcorrError, match=words):
        bench.main(**kwargs)


def test_main_checks_disk_space_first(fake_gpu, tmp_path, monkeypatch):
    usage = type("Usage", (), {"free": 1 << 20})
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage)
    with pytest.raises(XcorrError, match="not enough free disk space"):
        bench.main(workdir=tmp_path)
    assert list(tmp_path.iterdir()) == [] and fake_gpu == []


def test_main_flow_with_a_fake_gpu(fake_gpu, tmp_path):
    lines = []
    out = tmp_path / "res" / "bench.json"
    status = bench.main(frames=6, size="64x80", workdir=tmp_path / "work", json_path=out,
                        echo=lines.append, max_memory="1G")
    assert status == 0
    stack, path, max_memory, existed, repeat = fake_gpu[0]
    assert existed and stack.n_frames == 6 and stack.shape == (64, 80) and max_memory == "1G"
    assert repeat == 1
    assert path.parent.parent == tmp_path / "work"
    assert list((tmp_path / "work").iterdir()) == []  # the stack is deleted afterwards
    text = "\n".join(lines)
    assert text.startswith("xcorr bench align on ")
    assert "in the page cache" in text and "6 frames of 64x80 uint16" in text
    assert "| path | frames |" in text and "warm-up: read frames 0-3 (untimed)" in text
    assert "xcorr align --max-shift 16: end-to-end >= 80% of plain read:" in text
    assert "xcorr align (unbounded): end-to-end >= 80% of plain read:" in text
    doc = json.loads(out.read_text())
    assert doc["shape"] == [6, 64, 80] and len(doc["truth_shifts"]) == 6
    assert [r["name"] for r in doc["rows"]][:3] == [table.READ_IMREAD, table.READ_MEMMAP,
                                                    table.ALIGN_BOUNDED]
    assert len(doc["targets"]) == 2 and doc["header"][0].startswith("xcorr bench align on ")
    with pytest.raises(OutputError, match="exists"):
        bench.main(frames=6, size="64x80", workdir=tmp_path / "work", json_path=out)
    assert bench.main(frames=6, size="64x80", workdir=tmp_path / "work", json_path=out,
                      force=True, echo=lambda s: None) == 0


def test_main_keep(fake_gpu, tmp_path):
    lines = []
    assert bench.main(frames=3, size="64", workdir=tmp_path, keep=True, echo=lines.append) == 0
    kept = fake_gpu[0][1]
    assert kept.exists() and f"stack kept: {kept}" in lines
    assert tifffile.memmap(kept, mode="r").shape == (3, 64, 64)


def test_main_status_1_when_align_is_inaccurate(fake_gpu, tmp_path, monkeypatch):
    real_run = bench.run

    def worse(stack, path, **kw):
        rows = real_run(stack, path, **kw)
        rows[2]["status"] = "INACCURATE"
        return rows

    monkeypatch.setattr(bench, "run", worse)
    assert bench.main(frames=3, size="64", workdir=tmp_path, echo=lambda s: None) == 1


# ------------------------------------------------------------------------------ GPU

@pytest.mark.gpu
def test_cupy_pair_shift_matches_truth():
    import cupy as cp

    st = data.SyntheticStack(4, (128, 128), seed=3, step=3.0)
    f = st.frames(0, 4)
    ref = cp.asarray(f[0], cp.float32)
    for i in range(4):
        got = peers.cupy_pair_shift(ref, cp.asarray(f[i], cp.float32))
        np.testing.assert_array_equal(got, np.round(st.shifts[i]))


@pytest.mark.gpu
def test_quick_run(tmp_path):
    lines = []
    out = tmp_path / "bench.json"
    status = bench.main(quick=True, workdir=tmp_path, json_path=out, echo=lines.append)
    print("\n".join(lines))
    assert status == 0
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    for name in table.ALIGN_ROWS:
        assert rows[name]["status"] == "ok" and rows[name]["rms_px"] < 0.1, rows[name]
    assert rows[table.LOOP]["rms_px"] < 0.6 and not rows[table.LOOP]["error"]
    assert all(r["fps"] for r in rows.values())
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"]


def test_warm_align_covers_the_chunk_shapes(tmp_path, monkeypatch):
    import types

    import xcorr_app.alignment as align_stack  # warm_align imports align from there

    st = data.SyntheticStack(100, (64, 64), noise=False)
    path = tmp_path / "s.tif"
    st.write(path)
    calls = []

    def fake_align(stack, chunk_frames=64, **kw):  # the signature tells the chunk limit
        calls.append((np.shape(stack), kw))
        return types.SimpleNamespace(settings={"chunk_frames": 16})

    monkeypatch.setattr(align_stack, "align", fake_align)
    note = bench.warm_align(path, 100, {"device": "gpu", "max_shift": 16})
    # the first 64 frames run as 4 chunks of 16; the timed run ends on a chunk of 100 % 16 = 4
    assert [c[0] for c in calls] == [(64, 64, 64), (4, 64, 64)]
    assert calls[0][1] == {"device": "gpu", "max_shift": 16}
    assert note == "align on the first 64 and 4 frames in memory, chunks of 16 (untimed)"
    calls.clear()
    assert bench.warm_align(path, 10, {}) == \
        "align on the first 10 frames in memory, chunks of 16 (untimed)"
    assert [c[0] for c in calls] == [(10, 64, 64)]  # 16, 16, ... 10: the tail is the same


def test_warm_align_for_real_on_the_cpu(tmp_path):
    st = data.SyntheticStack(5, (64, 64))
    path = tmp_path / "s.tif"
    st.write(path)
    note = bench.warm_align(path, 5, {"device": "cpu", "max_shift": 16})
    assert note.startswith("align on the first 5 frames in memory")


def test_parallel_read_copies_every_frame(tmp_path, monkeypatch):
    st = data.SyntheticStack(7, (64, 64))
    path = tmp_path / "s.tif"
    st.write(path)
    copied = []
    real = np.copyto
    monkeypatch.setattr(np, "copyto", lambda dst, src: (copied.append(src.copy()),
                                                        real(dst, src)))
    assert peers.read_memmap_parallel(path, 3, chunk_frames=2) == 7
    got = sorted(copied, key=lambda a: int(a.sum()))
    want = sorted([st.frames(a, min(a + 2, b)) for a, b in ((0, 2), (2, 4), (4, 7))
                   for a in range(a, b, 2)], key=lambda a: int(a.sum()))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_bench_align_cpu_smoke(tmp_path):
    """``--device cpu``: every row ran (in process and one-shot processes), each xcorr row
    measured the known drift, the one-shot rows have a peak memory, the targets are printed."""
    import json

    from xcorr_app.bench._align import main

    lines = []
    status = main(device="cpu", frames=4, size="64x80", workdir=tmp_path,
                  json_path=tmp_path / "rows.json", echo=lines.append)
    assert status == 0, "\n".join(lines)
    doc = json.loads((tmp_path / "rows.json").read_text())
    rows = doc["rows"]
    assert len(rows) == 9 and not any(r["error"] for r in rows)
    for r in rows:
        assert r["seconds"] > 0
        if r["kind"] == "xcorr":
            assert r["rms_px"] is not None and r["rms_px"] < 0.5
        if "one-shot" in r["name"]:
            assert r["peak_bytes"] > 10e6
    assert len(doc["targets"]) == 4 and all("skimage loop" in t for t in doc["targets"])
    assert not list(tmp_path.glob("xcorr-bench-align-*"))  # the stack was removed


@pytest.mark.skipif(backend.gpu_available(), reason="the message of a machine without a GPU")
@pytest.mark.parametrize("mode", ["--floor", "--volumes"])
def test_gpu_only_modes_say_so_in_one_line_without_a_gpu(mode):
    res = xcorr("bench", "align", mode)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "needs a GPU" in res.stderr.strip().splitlines()[-1]
