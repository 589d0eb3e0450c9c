"""align --lucas-kanade: choices and refusals, through the command line."""

from cli_helpers import xcorr


def test_cli_lucas_kanade_choices_and_refusals(tmp_path):
    r = xcorr("align", "sample_data/cell_drift.tif", "--lucas-kanade", "maybe",
              "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "maybe" in r.stderr and "Traceback" not in r.stderr
    r = xcorr("align", "sample_data/cell_drift.tif", "--lucas-kanade", "on", "--reference",
              "mean", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and "--lucas-kanade on needs reference first" in r.stderr
    r = xcorr("align", "sample_data/cell_drift.tif", "--lucas-kanade", "off", "--device", "cpu",
              "--no-aligned", "-q", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr


def test_cli_reference_fit_is_said_and_refused_where_it_cannot_run(tmp_path):
    r = xcorr("align", "sample_data/cell_drift.tif", "--device", "cpu", "--no-aligned",
              "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    assert "Gauss-Newton step against the reference" in r.stdout
    r = xcorr("align", "sample_data/cell_drift.tif", "--lucas-kanade", "reference",
              "--reference", "previous", "--out", str(tmp_path / "p"))
    assert r.returncode == 2 and r.stderr.startswith("error:") and "Traceback" not in r.stderr
    assert "--lucas-kanade reference needs one reference image" in r.stderr
