"""What the benchmarks share (:mod:`xcorr_app.bench._common`): timing in turns, cells, the
header's versions."""

from xcorr_app._environment import versions
from xcorr_app.bench import _common as common


def test_cells_and_versions():
    assert common.fmt_ms(None) == "n/a" and common.fmt_ms(1500.4) == "1500"
    assert common.fmt_ms(0.123456) == "0.123"
    assert common.cell("a|b") == "a\\|b"
    assert common.reason(RuntimeError("")) == "RuntimeError"
    line = common.versions_line(("numpy", "skimage"))
    found = versions(("numpy",))
    assert line.startswith(f"xcorr {found['xcorr']}, numpy {found['numpy']}, scikit-image ")
    assert common.markdown_header(("a", "b")) == "| a | b |\n| --- | --- |"


def test_measure_paths_takes_turns_and_reports_medians(monkeypatch):
    """Paths are timed in rounds, in turn; a missing, a failing and a wrong path are reported."""
    import numpy as np

    from xcorr_app.bench import _common as common
    import xcorr_app._cuda as cuda

    order, times = [], {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 9.0, 4.0])}

    def fake_time_gpu(fn, **kwargs):
        name = fn.__name__
        order.append(name)
        if name == "c":
            raise RuntimeError("out of memory\nmore text")
        return next(times[name])

    monkeypatch.setattr(cuda, "time_gpu", fake_time_gpu)  # measure_paths imports it from there
    monkeypatch.setattr(common, "relative_error",  # the device version needs CuPy
                        lambda got, want: float(np.abs(got - want).max() / np.abs(want).max()))

    def path(name, value):
        def fn():
            return np.full(3, value)
        fn.__name__ = name
        return fn

    def broken():
        raise ValueError("cannot build")

    makers = {"a": lambda: path("a", 1.0), "b": lambda: path("b", 1.5), "c": lambda: path("c", 1.0),
              "none": lambda: None, "broken": broken}
    want = np.ones(3)
    ms, err, na = common.measure_paths(makers, {"a": want, "b": want}, {"none": "no torch"},
                                       rounds=3)
    assert order == ["a", "b", "c", "a", "b", "a", "b"]  # c failed in round one: dropped
    assert ms == {"a": 2.0, "b": 5.0, "c": None, "none": None, "broken": None}
    assert err["a"] == 0.0 and err["b"] == 0.5 and err["c"] is None
    assert na["none"] == "no torch" and na["c"] == "RuntimeError: out of memory"
    assert na["broken"] == "ValueError: cannot build" and na["a"] == ""


def test_the_one_shot_rows_say_whether_xcorr_was_compiled(tmp_path, monkeypatch):
    """An installed xcorr imports compiled bytecode; a checkout without it, where the
    environment forbids writing it, compiles every module in every process."""
    import py_compile

    from xcorr_app.bench._oneshot import bytecode_line

    for name in ("a.py", "b.py"):
        (tmp_path / name).write_text("x = 1\n")
    py_compile.compile(str(tmp_path / "a.py"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert "1 of 2 without bytecode and PYTHONDONTWRITEBYTECODE set" in bytecode_line(tmp_path)
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE")
    assert "written by the first process" in bytecode_line(tmp_path)
    py_compile.compile(str(tmp_path / "b.py"))
    assert bytecode_line(tmp_path).endswith("compiled bytecode, as an installed xcorr has")


def test_a_one_shot_process_that_hangs_is_stopped_and_reported():
    from xcorr_app.bench._oneshot import python_argv, run_process

    r = run_process(python_argv("-c", "import sys, time\nsys.stderr.write('started\\n')\n"
                                      "sys.stderr.flush()\ntime.sleep(60)"), timeout=2)
    assert r["returncode"] == -9 and r["stderr"] == "stopped after 2 s"
    assert 2 <= r["seconds"] < 30 and r["shifts"] is None
    ok = run_process(python_argv("-c", "pass"))
    assert ok["returncode"] == 0 and ok["stderr"] == ""


def test_a_stopped_one_shot_process_takes_the_processes_it_started_along(tmp_path):
    import os
    import time

    from xcorr_app.bench._oneshot import python_argv, run_process

    pid_file = tmp_path / "child"
    source = ("import subprocess, sys, time\n"
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
              "time.sleep(60)")
    r = run_process(python_argv("-c", source), timeout=3)
    assert r["returncode"] == -9
    child = int(pid_file.read_text())
    for _ in range(50):  # (killed: gone once its parent, this test's init, reaps it)
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        with open(f"/proc/{child}/stat") as f:
            if f.read().split(")")[-1].split()[0] == "Z":
                break
        time.sleep(0.1)
    else:
        raise AssertionError("the grandchild outlived the stop")
