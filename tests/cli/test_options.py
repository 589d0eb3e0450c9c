"""The command line's parameter types, choices and error handling, in process (CliRunner)."""

import click
import pytest
from click.testing import CliRunner

from xcorr_app.alignment import NORMALIZATIONS, SUBPIXEL, AlignOptions
from xcorr_app.alignment.piecewise import FIELD_RESAMPLE
from xcorr_app.alignment.warp import RESAMPLE
from xcorr_app.cli._main import cli
from xcorr_app.cli._options import MAX_SHIFT, MEMORY, PREFILTER
from xcorr_app.errors import InputError, XcorrError
from xcorr_app.filters import MODES


def test_max_shift_type():
    assert MAX_SHIFT.convert("8", None, None) == 8
    assert MAX_SHIFT.convert("4,6", None, None) == (4, 6)
    assert MAX_SHIFT.convert(None, None, None) is None
    for bad in ("a,b", "-1", "1,2,3", ""):
        with pytest.raises(InputError, match="--max-shift"):
            MAX_SHIFT.convert(bad, None, None)


def test_spec_types_check_and_pass_on_as_written():
    assert MEMORY.convert("64M", None, None) == "64M"
    with pytest.raises(XcorrError, match="memory size"):
        MEMORY.convert("lots", None, None)
    # (a prefilter is parsed once, by the run's options: the command's line is theirs)
    assert PREFILTER.convert("median:3", None, None) == "median:3"
    with pytest.raises(XcorrError, match="prefilter"):
        AlignOptions(prefilter="median:3")
    res = CliRunner().invoke(cli, ["align", "x.tif", "--prefilter", "median:3"])
    assert res.exit_code == 2 and "prefilter" in res.output


def choices(command, name):
    param = next(p for p in command.params if p.name == name)
    assert isinstance(param.type, click.Choice)
    return tuple(param.type.choices)


def test_choices_come_from_the_modules():
    align, filter_cmd = cli.get_command(None, "align"), cli.get_command(None, "filter")
    assert choices(align, "normalization") == tuple(NORMALIZATIONS)
    assert choices(align, "subpixel") == tuple(SUBPIXEL)
    # the rigid shifts' resamplings, then the motion field's (--patches) not already there
    assert choices(align, "resample") == tuple(dict.fromkeys(RESAMPLE + tuple(FIELD_RESAMPLE)))
    assert choices(filter_cmd, "mode") == tuple(MODES)


@pytest.mark.parametrize("args", [[], ["align"], ["filter"], ["info"], ["bench"],
                                  ["bench", "xcorr"], ["bench", "filter"], ["bench", "conv"],
                                  ["bench", "align"]])
def test_every_help_text(args):
    res = CliRunner().invoke(cli, [*args, "--help"])
    assert res.exit_code == 0 and res.output.startswith("Usage: "), res.output


def one_error_line(res, *words):
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.stderr.strip().splitlines() if not ln.startswith("note:")]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for w in words:
        assert w in lines[0]


@pytest.mark.parametrize("debug", [None, "0", ""])
def test_bad_option_value_is_one_line(tmp_path, monkeypatch, debug):
    if debug is None:
        monkeypatch.delenv("XCORR_DEBUG", raising=False)
    else:
        monkeypatch.setenv("XCORR_DEBUG", debug)
    res = CliRunner().invoke(cli, ["align", str(tmp_path / "x.tif"), "--max-shift", "1,2,3"])
    one_error_line(res, "--max-shift", "'1,2,3'")
    res = CliRunner().invoke(cli, ["align", str(tmp_path / "x.tif"), "--max-memory", "lots"])
    one_error_line(res, "memory size")


def test_debug_shows_the_exception(tmp_path, monkeypatch):
    monkeypatch.setenv("XCORR_DEBUG", "1")
    res = CliRunner().invoke(cli, ["align", str(tmp_path / "x.tif"), "--max-shift", "x"])
    assert isinstance(res.exception, InputError)


def test_click_exit_codes_pass_through(monkeypatch):
    """A command's own exit status (click.exceptions.Exit) is not an internal error."""
    from xcorr_app.bench import _filter

    monkeypatch.delenv("XCORR_DEBUG", raising=False)
    monkeypatch.setattr("xcorr_app.backend.gpu_available", lambda: True)
    monkeypatch.setattr(_filter, "run", lambda names, **kw: [{"status": "MISMATCH"}])
    res = CliRunner().invoke(cli, ["bench", "filter", "--quick"])
    assert res.exit_code == 1 and "internal error" not in res.output


def test_a_refused_thread_is_a_limit_not_a_bug(tmp_path, monkeypatch):
    """The system refusing a thread (a process limit, as under ``ulimit -v``) is one error line
    and exit 2, as out of memory is; another RuntimeError stays an internal error."""
    import threading

    from sample_paths import stack_path

    monkeypatch.delenv("XCORR_DEBUG", raising=False)

    def refused(self):
        raise RuntimeError("can't start new thread")

    tif = stack_path("cell")
    monkeypatch.setattr(threading.Thread, "start", refused)
    res = CliRunner().invoke(cli, ["align", str(tif), "--out", str(tmp_path / "o"),
                                   "--device", "cpu"])
    one_error_line(res, "refused a new thread", "ulimit")
    assert res.exit_code == 2
    monkeypatch.setattr(threading.Thread, "start", lambda self: (_ for _ in ()).throw(
        RuntimeError("another")))
    res = CliRunner().invoke(cli, ["align", str(tif), "--out", str(tmp_path / "o"),
                                   "--device", "cpu"])
    assert res.exit_code == 1 and "internal error: RuntimeError: another" in res.stderr
