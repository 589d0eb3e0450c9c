"""xcorr bench conv on the CPU: its rows, arithmetic and report (the GPU run is on the device)."""

import pytest

from xcorr_app.bench import _conv as bench
from xcorr_app.errors import XcorrError


def test_rows_are_the_papers_layers_and_mobilenet():
    rows = bench.problems()
    assert len(rows) == 12 * 2 + 19
    assert {r[2] for r in rows if r[1] == "im2win"} == {128, 16}
    assert {r[2] for r in rows if r[1] == "pointwise"} == {32}
    assert rows[3] == ("conv4", "im2win", 128, 32, 224, 224, 64, 7, 2)
    assert all(r[7] == 1 and r[8] == 1 for r in rows if r[1] == "pointwise")


def test_flops_and_geomean():
    assert bench.flops(1, 1, 3, 3, 1, 3, 1) == 18.0
    assert bench.flops(2, 3, 227, 227, 96, 11, 4) == 2.0 * 2 * 96 * 55 * 55 * 3 * 121
    assert bench.geomean([1.0, 4.0, None]) == pytest.approx(2.0)
    assert bench.geomean([]) is None


def test_report_and_targets():
    def row(kind, ours, cudnn, cublas, mem=(1.0, 2.0, 3.0)):
        return {"name": "x", "kind": kind, "shape": [1, 1, 1, 1, 1, 1, 1], "ms":
                {"ours": ours, "cudnn": cudnn, "im2col_cublas": cublas},
                "tflops": {}, "mem_mb": dict(zip(("ours", "cudnn", "im2col_cublas"), mem)),
                "vs_best_peer": min(cudnn, cublas) / ours, "vs_cudnn": cudnn / ours,
                "vs_cublas": cublas / ours, "rel_error": 1e-7, "kernel": "winograd"}

    rows = [row("im2win", 2.0, 1.0, 4.0), row("im2win", 1.0, 2.0, 4.0, (3.0, 2.0, 1.0)),
            row("pointwise", 1.0, 1.0, 2.0)]
    lines = bench.format_rows(rows)
    assert len(lines) == 2 + 3 and lines[2].count("|") == 14
    assert lines[2].startswith("| x | 1 | 1,1,1 -> 1, 1/1 | winograd | 2.000 |")
    rows[0]["ms"]["ours_im2win"], rows[0]["mem_mb"]["ours_im2win"] = 3.0, 5.0
    assert bench.format_rows(rows)[2].endswith("| 3.000 / 5 |")
    summary = bench.summary_lines(rows)
    assert summary[0].startswith("im2win layers: geometric mean 1.00x cuDNN (target >= 1x: yes)")
    assert "more memory than cuDNN on 1 of 2 rows" in summary[0]
    assert "2.00x im2col+cuBLAS (target >= 1x: yes)" in summary[1]
    assert summary[2] == ("pointwise layers: geometric mean 1.00x cuDNN, the slowest x 1.00x "
                          "(target >= 1x, none below 0.8x: yes)")
    rows += [row("pointwise", 1.0, 1.5, 2.0), row("pointwise", 1.0, 0.7, 2.0)]
    rows[-1]["name"] = "pw9"
    assert bench.summary_lines(rows)[2].endswith("the slowest pw9 0.70x (target >= 1x, none "
                                                 "below 0.8x: no)")
    rows[-1]["vs_cudnn"] = 2.0
    rows.append(row("pointwise", 1.0, 1.5, 2.0))
    rows[-1]["vs_cudnn"] = None  # a failed row: no ratio
    assert bench.summary_lines(rows)[2].endswith(", 1 not measured (target >= 1x, none below "
                                                 "0.8x: no)")


def test_needs_a_gpu(monkeypatch):
    from xcorr_app import backend

    monkeypatch.setattr(backend, "gpu_available", lambda: False)
    with pytest.raises(XcorrError, match="needs a GPU"):
        bench.main()
