"""Without ``--out`` the results land in the current folder, wherever the input is (issue 48:
they landed beside the input, inside the repository for the samples): ``./STEM_xcorr/`` of
``xcorr align``, ``./STEM_filtered.tif`` of ``xcorr filter``."""

from pathlib import Path

from cli_helpers import digest, xcorr
from sample_paths import folder_path, stack_path
from xcorr_app.cli._options import default_out


def test_align_and_filter_write_into_the_current_folder(tmp_path):
    samples = stack_path("moon").parent
    before = digest(samples)
    res = xcorr("align", stack_path("moon"), "--no-aligned", "--device", "cpu", "-q",
                cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "moon_drift_xcorr" / "shifts.csv").is_file()
    res = xcorr("filter", stack_path("moon"), "--kernel", "box:3", "--device", "cpu", "-q",
                cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["moon_drift_filtered.tif",
                                                          "moon_drift_xcorr"]
    assert digest(samples) == before  # (nothing new beside the inputs)


def test_the_stem_of_a_file_a_folder_and_a_source_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_out(stack_path("cell"), "_xcorr") == Path("cell_drift_xcorr")
    assert default_out(folder_path("cell"), "_xcorr") == Path("cell_frames_xcorr")
    assert default_out(Path("."), "_xcorr") == Path(f"{tmp_path.name}_xcorr")
    (tmp_path / "rec.h5").touch()  # (a FILE:/DATASET path is split where FILE exists)
    assert default_out(f"{tmp_path / 'rec.h5'}:/images/raw", "_xcorr") == Path("rec_xcorr")
