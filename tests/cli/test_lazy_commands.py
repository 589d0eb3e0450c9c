"""The command group loads a command's module only when that command runs: ``xcorr --help``
lists every command with its one-line help and imports none of them."""

import os
import re
import subprocess
import sys

import click
import pytest

from cli_helpers import ROOT, xcorr
from xcorr_app.cli._main import COMMANDS, cli


def _modules_after(*args):
    """The ``xcorr_app`` and NumPy modules imported by ``xcorr ARGS`` (help: exit 0)."""
    code = ("import sys; from xcorr_app.cli._main import main; sys.argv = ['xcorr', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print(' '.join(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('xcorr_app', 'numpy'))), file=sys.stderr)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return set(res.stderr.split())


def test_group_help_imports_no_command_and_no_numpy():
    loaded = _modules_after("--help")
    assert not {m for m in loaded if m.startswith("xcorr_app.cli._") and m != "xcorr_app.cli._main"}
    assert "numpy" not in loaded


def test_a_command_loads_only_its_module():
    loaded = _modules_after("info", "--help")
    assert "xcorr_app.cli._info" in loaded
    assert not loaded & {"xcorr_app.cli._align", "xcorr_app.cli._filter", "xcorr_app.cli._bench"}


def test_help_lists_every_command_with_its_own_one_line_help():
    res = xcorr("--help")
    assert res.returncode == 0
    listed = res.stdout.split("Commands:")[1]
    formatter = click.HelpFormatter()
    limit = formatter.width - 6 - max(map(len, COMMANDS))
    for name, (_, _, short) in COMMANDS.items():
        command = cli.get_command(None, name)
        assert isinstance(command, click.Command), name
        # the registry's line is the command's own (its docstring's first sentence)
        assert command.get_short_help_str(200) == short, name
        shown = re.escape(command.get_short_help_str(limit))
        assert re.search(rf"^  {name} +{shown}$", listed, re.M), (name, listed)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_runs_under_the_usage_error_hooks(name, tmp_path):
    res = xcorr(name, "--no-such-option", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert res.stderr.startswith("error: ") and "--no-such-option" in res.stderr


def test_an_unknown_command_is_one_line(tmp_path):
    res = xcorr("tuen", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("error: ") and "tuen" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
