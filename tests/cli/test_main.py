"""The command's end (``cli._main.leave``): a process that imported CuPy exits without the
interpreter's teardown, after what Python runs at exit (the threads' end, atexit), its output
flushed, with the command's exit status."""

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


def test_a_real_process_keeps_its_output_atexit_work_and_threads(tmp_path):
    """A fresh process with a stand-in CuPy: ``xcorr --version`` through ``main``; the output
    written before, an atexit handler's file and a thread pool's last task all come through."""
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("")
    script = textwrap.dedent(f"""
        import atexit, sys, time
        from concurrent.futures import ThreadPoolExecutor
        import cupy
        sys.stdout.write("before ")  # (no newline: still buffered at the exit)
        atexit.register(lambda: open({str(tmp_path / 'atexit')!r}, 'w').write('ran'))
        pool = ThreadPoolExecutor(1)
        pool.submit(lambda: (time.sleep(0.3), open({str(tmp_path / 'task')!r}, 'w').write('ran')))
        sys.argv = ["xcorr", "--version"]
        from xcorr_app.cli import main
        main()
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    env.pop("XCORR_DEBUG", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("before xcorr, version")
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "task").read_text() == "ran"
