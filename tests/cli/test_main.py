"""The command's end (``cli._main.leave``): a process that imported CuPy exits without the
interpreter's teardown, after what Python runs at exit (the threads' end, atexit), its output
flushed, with the command's exit status; and its warnings as notes (``warnings_as_notes``)."""

import os
import subprocess
import sys
import textwrap
import threading
import types

import pytest

from xcorr_app.cli import _main


class Exited(Exception):
    pass


@pytest.fixture
def spied(monkeypatch):
    calls = []
    monkeypatch.setattr(threading, "_shutdown", lambda: calls.append("threads"))
    monkeypatch.setattr("atexit._run_exitfuncs", lambda: calls.append("atexit"))

    def exit_now(code):
        calls.append(("exit", code))
        raise Exited

    monkeypatch.setattr(os, "_exit", exit_now)
    monkeypatch.delenv("XCORR_DEBUG", raising=False)
    return calls


@pytest.mark.parametrize("code, status", [(None, 0), (0, 0), (2, 2)])
def test_a_cupy_process_ends_after_the_threads_and_atexit(spied, monkeypatch, code, status):
    monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    with pytest.raises(Exited):
        _main.leave(code)
    assert spied == ["threads", "atexit", ("exit", status)]


@pytest.mark.parametrize("case", ["no cupy", "debug", "text code"])
def test_otherwise_python_ends_it(spied, monkeypatch, case):
    if case == "no cupy":
        monkeypatch.delitem(sys.modules, "cupy", raising=False)
    else:
        monkeypatch.setitem(sys.modules, "cupy", types.ModuleType("cupy"))
    if case == "debug":
        monkeypatch.setenv("XCORR_DEBUG", "1")
    _main.leave("usage: ..." if case == "text code" else 0)
    assert spied == []


def _run_process(tmp_path, body, extra_env=None):
    """``body`` in a fresh process with a stand-in CuPy on the path; its CompletedProcess."""
    (tmp_path / "cupy").mkdir(exist_ok=True)
    (tmp_path / "cupy" / "__init__.py").write_text("")
    script = textwrap.dedent("""
        import atexit, sys, time
        import cupy

        class Teardown:  # (its __del__ runs only in the interpreter's teardown)
            def __del__(self):
                sys.stderr.write("torn down")
        keep = Teardown()
    """) + textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    env.pop("XCORR_DEBUG", None)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**env, **(extra_env or {})}, timeout=60)


def test_a_real_process_keeps_its_output_atexit_work_and_threads(tmp_path):
    """``xcorr --version`` through ``run`` with a stand-in CuPy: the output written before, an
    atexit handler's file and a thread pool's last task all come through, and the interpreter's
    teardown is skipped (with ``XCORR_DEBUG`` it is not)."""
    body = f"""
        from concurrent.futures import ThreadPoolExecutor
        sys.stdout.write("before ")  # (no newline: still buffered at the exit)
        atexit.register(lambda: open({str(tmp_path / 'atexit')!r}, 'w').write('ran'))
        pool = ThreadPoolExecutor(1)
        pool.submit(lambda: (time.sleep(0.3), open({str(tmp_path / 'task')!r}, 'w').write('ran')))
        sys.argv = ["xcorr", "--version"]
        from xcorr_app.cli import run
        run()
    """
    proc = _run_process(tmp_path, body)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("before xcorr, version")
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "task").read_text() == "ran"
    assert "torn down" not in proc.stderr
    debug = _run_process(tmp_path, body, {"XCORR_DEBUG": "1"})
    assert debug.returncode == 0 and "torn down" in debug.stderr


def test_an_error_keeps_its_status_and_what_its_frames_held_is_closed(tmp_path):
    """A command that fails (exit 2) while a generator of its frames is open: the generator
    is closed before the process ends (the exception's frames are gone by then)."""
    body = f"""
        from xcorr_app.cli import _main

        def chunks():
            try:
                yield 1
            finally:
                open({str(tmp_path / 'closed')!r}, 'w').write('yes')

        def failing(**kwargs):
            it = chunks()
            next(it)
            sys.exit(2)

        _main.cli = failing
        _main.run()
    """
    proc = _run_process(tmp_path, body)
    assert proc.returncode == 2, proc.stderr
    assert (tmp_path / "closed").read_text() == "yes"


def test_an_output_that_cannot_be_flushed_fails_the_run(tmp_path):
    """stdout closed under the process (``xcorr ... | head``): status 120 and a note, as
    Python's own exit gives, not 0."""
    body = """
        from xcorr_app.cli import _main

        class Gone:  # (the reader went away: what is buffered cannot be written)
            name = "<stdout>"
            def write(self, text):
                return len(text)
            def flush(self):
                raise BrokenPipeError(32, "Broken pipe")

        def prints(**kwargs):
            sys.stdout = Gone()
            sys.stdout.write("x" * 10)

        _main.cli = prints
        _main.run()
    """
    proc = _run_process(tmp_path, body)
    assert proc.returncode == 120 and "Exception ignored" in proc.stderr


@pytest.mark.parametrize("user", [None, "default"])
def test_a_commands_quiet_notes_sit_inside_the_groups(monkeypatch, user):
    """The group's notes (before the command's options are parsed), then the command's own
    with its parsed ``--quiet``: the processes it starts print no warnings, the group's
    setting comes back after it, and a ``PYTHONWARNINGS`` of the user's is left alone."""
    import warnings

    if user is None:
        monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    else:
        monkeypatch.setenv("PYTHONWARNINGS", user)
    shown = []
    monkeypatch.setattr(_main.click, "echo", lambda text, err=False: shown.append(text))
    with _main.warnings_as_notes(False):
        group = os.environ.get("PYTHONWARNINGS")
        with _main.warnings_as_notes(True):
            assert os.environ.get("PYTHONWARNINGS") == (user or "ignore")
            warnings.warn("hidden", UserWarning)
        assert os.environ.get("PYTHONWARNINGS") == group == (user or "ignore:no usable GPU")
        warnings.warn("said", UserWarning)
    assert os.environ.get("PYTHONWARNINGS") == user
    assert shown == ["note: UserWarning: said"]


def test_a_reader_gone_from_the_pipe_ends_the_command_quietly():
    """``xcorr info FILE | head -1``: the pipe's reader gone printed "error: BrokenPipeError"
    and exited 1; it ends quietly, 141 as a shell reports a command a pipe stopped."""
    from cli_helpers import child_env
    from sample_paths import stack_path

    read, write = os.pipe()
    os.close(read)  # (the reader gone before a line is written: EPIPE at the first)
    try:
        res = subprocess.run([sys.executable, "-m", "xcorr_app.cli", "info",
                              str(stack_path("cell"))], stdout=write, stderr=subprocess.PIPE,
                             text=True, env=child_env(), timeout=300)
    finally:
        os.close(write)
    assert res.returncode == 141 and res.stderr == "", res.stderr


@pytest.mark.parametrize("command", [
    ("filter", "{cell}", "--kernel", "gaussian:2", "--out", "{tmp}/x.png"),
    ("apply", "{tmp}/none.csv", "{cell}", "--out", "{tmp}/a.tif"),
    ("align", "{cell}", "--workers", "0", "--out", "{tmp}/o"),
])
def test_a_refused_command_is_its_error_line_alone(tmp_path, command):
    """Device auto without a GPU said "note: no usable GPU ..." before the error of a command
    refused (filter, apply, align --workers, zlocate): the note waits for the checks."""
    from cli_helpers import child_env
    from sample_paths import stack_path

    args = [a.format(cell=stack_path("cell"), tmp=tmp_path) for a in command]
    # (no GPU in the child, where the note is made, on any machine)
    res = subprocess.run([sys.executable, "-m", "xcorr_app.cli", *args], capture_output=True,
                         text=True, env=child_env(CUDA_VISIBLE_DEVICES=""), timeout=300)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
