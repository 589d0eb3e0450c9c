"""``xcorr zlocate MOVIE --zstack STACK --out DIR``: the table and the plot, its errors."""

import csv
import sys
from pathlib import Path

import numpy as np
import pytest

from cli_helpers import xcorr

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "alignment" / "volume"))
from volume_samples import depth_movie  # noqa: E402  (the API tests' z-stack and frames)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zlocate")
    depths = np.array([3.0, 4.25, 6.5, 8.75, 10.0])
    frames, zstack = depth_movie(("camera", "coins", "moon"), depths, [(1, -2)] * 5,
                                 photons=1e3, depth=12, size=32)
    np.save(folder / "movie.npy", frames)
    np.save(folder / "zstack.npy", zstack.astype(np.float32))
    return folder, depths


def test_writes_table_and_plot(inputs):
    folder, depths = inputs
    out = folder / "out"
    res = xcorr("zlocate", folder / "movie.npy", "--zstack", folder / "zstack.npy",
                "--out", out, "--max-shift", "4", "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert "xcorr zlocate: 5 frames against 12 planes on CPU" in res.stdout
    rows = list(csv.DictReader((out / "zlocate.csv").open()))
    assert list(rows[0]) == ["frame", "depth", "plane", "dy", "dx", "score", "confidence",
                             "at_edge"]
    got = np.array([float(r["depth"]) for r in rows])
    assert np.abs(got - depths).max() < 0.2, got
    assert (out / "zlocate.png").read_bytes()[:4] == b"\x89PNG"
    again = xcorr("zlocate", folder / "movie.npy", "--zstack", folder / "zstack.npy",
                  "--out", out, "--device", "cpu")
    assert again.returncode == 2 and again.stderr.startswith("error: ")


@pytest.mark.parametrize("args, message", [
    (["--max-shift", "1,2,3"], "--max-shift '1,2,3': give N or DY,DX"),
    (["--zstack", "missing.npy"], "--zstack missing.npy: no such file"),
    (["--out", "table.csv"], "--out is the folder zlocate writes"),
])
def test_errors_are_one_line(inputs, args, message):
    folder, _ = inputs
    zstack = [] if "--zstack" in args else ["--zstack", folder / "zstack.npy"]
    res = xcorr("zlocate", folder / "movie.npy", *zstack, *args, "--device", "cpu",
                cwd=folder)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines


def test_a_frame_with_nan_is_named_a_frame(inputs, tmp_path):
    """zlocate's movie is frames: a NaN pixel was said of "volume 2"."""
    folder, _ = inputs
    movie = np.load(folder / "movie.npy").astype(np.float32)
    movie[2, 3, 3] = np.nan
    np.save(tmp_path / "nan.npy", movie)
    res = xcorr("zlocate", tmp_path / "nan.npy", "--zstack", folder / "zstack.npy", "--out",
                tmp_path / "o", "--device", "cpu")
    assert res.returncode == 2 and "frame 2 of" in res.stderr and "volume" not in res.stderr


def test_zlocate_reports_its_frames_as_it_goes():
    """The command had no progress bar (-q's help said it silenced one): the API counts each
    chunk's frames, which the bar shows."""
    from xcorr_app.alignment.volume import zlocate

    zstack = np.random.default_rng(4).random((5, 16, 16))
    seen = []
    result = zlocate(zstack[[4, 1, 2, 0]], zstack, device="cpu", progress=seen.append)
    assert sum(seen) == 4 and result.plane.tolist() == [4, 1, 2, 0]
