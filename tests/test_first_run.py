"""A process's first use of the GPU (xcorr_app/_first_run.py): the warm-up (CuPy's import and the
CUDA context in a background thread, the caller going on at once, the probe waiting for it),
started by a command that computes on the GPU from its parsed options before the modules of its
run are imported; held for a small job under device auto; the small-job rule of ``auto``."""

import subprocess
import sys
import threading
import types

import click
from click.testing import CliRunner
import pytest

from xcorr_app import _first_run, backend
from xcorr_app._first_run import FIRST_RUN_PIXELS, SMALL_JOB_PIXELS, auto_device, small_job_note
from xcorr_app.cli import _main
from xcorr_app.cli._options import DEVICE, QUIET

from cli_helpers import ROOT, child_env


def _fresh(monkeypatch):
    """No warm-up started, none held, no probe's answer (one command of a process)."""
    monkeypatch.setattr(_first_run, "_warm_up", None)
    monkeypatch.setattr(_first_run, "_warm_up_held", False)
    _first_run.probe_gpu.cache_clear()


@pytest.fixture
def fake_gpu(monkeypatch):
    """A CuPy whose device count waits for ``release`` and records the thread that asked."""
    release, seen = threading.Event(), []

    def count():
        seen.append(threading.current_thread().name)
        assert release.wait(10)
        return 0  # no device: the probe says so, and nothing else of CuPy is touched

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=count))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(_first_run, "gpu_likely", lambda: True)
    monkeypatch.setattr(backend, "_warned_fallback", True)  # (no warning to filter)
    _fresh(monkeypatch)
    yield release, seen
    release.set()
    if _first_run._warm_up is not None:
        _first_run._warm_up.join(10)
    _first_run.probe_gpu.cache_clear()


def test_the_caller_goes_on_and_the_probe_waits_for_the_warm_up(fake_gpu):
    release, seen = fake_gpu
    assert _first_run.start_gpu_warm_up()  # returns while the warm-up is still in CuPy
    assert not _first_run.start_gpu_warm_up()  # once a process
    assert _first_run._warm_up.is_alive()
    release.set()
    assert backend.resolve_device("auto") == "cpu"
    assert seen == ["xcorr-gpu-warm-up"]  # the probe's work was the thread's, not redone
    assert "no CUDA device" in backend.gpu_unavailable_reason()


def test_no_warm_up_where_no_gpu_is_likely(fake_gpu, monkeypatch):
    monkeypatch.setattr(_first_run, "gpu_likely", lambda: False)
    assert not _first_run.start_gpu_warm_up() and _first_run._warm_up is None


@pytest.mark.parametrize("device, started", [("cpu", False), ("auto", True), ("gpu", True)])
def test_a_device_command_starts_it_from_its_parsed_device(fake_gpu, device, started):
    @click.command(cls=_main.DeviceCommand)
    @DEVICE
    @QUIET
    def cmd(device, quiet):
        click.echo(f"ran {device} warm-up={_first_run._warm_up is not None}")

    fake_gpu[0].set()
    out = CliRunner().invoke(cmd, ["--device", device]).output
    assert out == f"ran {device} warm-up={started}\n"


@pytest.mark.parametrize("args, events", [
    (["align", "s.tif"], ["warm-up", "run"]),
    (["zlocate", "m.tif", "--zstack", "z.tif"], ["warm-up", "run"]),
    (["align", "s.tif", "--device", "cpu"], ["run"]), (["align", "s.tif", "--device=cpu"], ["run"]),
    (["align", "--help"], []), (["align", "s.tif", "--device", "tpu"], []),  # (a usage error)
    (["info"], ["run"]), (["bench", "align", "--help"], ["run"])])
def test_a_gpu_command_starts_it_once_parsed_before_its_run(fake_gpu, monkeypatch, args,
                                                             events):
    """The command's module is imported for click to parse its options, then the warm-up
    starts (not for ``--help``, a bad option or ``--device cpu``), then the command runs."""
    seen = []
    monkeypatch.setattr(_first_run, "start_gpu_warm_up", lambda **k: seen.append("warm-up"))
    get_command = _main.XcorrGroup.get_command
    invoke = click.Context.invoke

    def recorded(self, ctx, name):
        seen.append(f"import {name}")
        return get_command(self, ctx, name)

    def callback(ctx, fn, *a, **k):
        if ctx.info_name == args[0]:
            seen.append("run")
        return invoke(ctx, fn, *a, **k)

    monkeypatch.setattr(_main.XcorrGroup, "get_command", recorded)
    monkeypatch.setattr(click.Context, "invoke", callback)
    fake_gpu[0].set()  # (the command's own probe: no device, at once)
    CliRunner().invoke(_main.cli, args)
    assert seen == [f"import {args[0]}", *events]


def test_the_warm_up_starts_before_the_modules_of_the_run(tmp_path):
    """In a fresh ``xcorr align`` process the warm-up starts before the command imports the
    pipeline, the readers and the outputs' writers, which it then overlaps."""
    code = ("import sys\n"
            "from xcorr_app import _first_run\n"
            "_first_run.start_gpu_warm_up = lambda **k: print(' '.join(sorted(\n"
            "    m for m in sys.modules if m.startswith('xcorr_app'))), file=sys.stderr)\n"
            "from xcorr_app.cli._main import main\n"
            "sys.argv = ['xcorr', 'align', sys.argv[1], '--device', 'gpu', '--out', sys.argv[2]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n")
    env = child_env()
    res = subprocess.run([sys.executable, "-c", code, str(ROOT / "sample_data" / "cell_drift.tif"),
                          str(tmp_path / "o")], capture_output=True, text=True, env=env,
                         timeout=120)
    loaded = set(res.stderr.splitlines()[0].split())
    assert "xcorr_app.cli._align" in loaded  # (parsed by its command)
    assert not loaded & {"xcorr_app.alignment._api", "xcorr_app.alignment._run",
                         "xcorr_app.alignment._executors", "xcorr_app.io._reader",
                         "xcorr_app.alignment.outputs._save"}, res.stderr


def _small_and_large(tmp_path):
    small, large = tmp_path / "small.tif", tmp_path / "large.tif"
    small.write_bytes(b"\0" * 1000)
    with open(large, "wb") as f:  # (sparse: no disk written)
        f.truncate(2 * SMALL_JOB_PIXELS + 1)
    return str(small), str(large)


def _align_starts(monkeypatch, tmp_path, *args):
    """The warm-ups ``xcorr align ARGS`` starts (``(started, keywords)`` each), as the first
    command of a process."""
    _fresh(monkeypatch)
    started_now = []
    real = _first_run.start_gpu_warm_up
    monkeypatch.setattr(_first_run, "start_gpu_warm_up",
                        lambda **k: started_now.append((real(**k), k)) or started_now[-1][0])
    CliRunner().invoke(_main.cli, ["align", *args, "--out", str(tmp_path / "o")])
    monkeypatch.setattr(_first_run, "start_gpu_warm_up", real)
    return started_now


@pytest.mark.parametrize("which, extra, started", [
    ("small", [], False), ("small", ["--device", "auto"], False),
    ("small", ["--device=auto"], False),
    ("small", ["--device", "gpu"], True), ("small", ["--device=gpu"], True),
    ("small", ["--volumes"], True), ("small", ["--gpus", "0"], True),
    ("small", ["--gpus=0,1"], True),
    ("large", [], True),
    # (an option given twice is a usage error: nothing starts)
    ("small", ["--device", "gpu", "--device", "auto"], False),
    ("small", ["--device", "auto", "--device=gpu"], False)])
def test_align_of_a_small_file_under_auto_starts_none(fake_gpu, monkeypatch, tmp_path, which,
                                                      extra, started):
    """Device auto aligns a small job on the CPU: the warm-up would only slow it down, so an
    ``align`` of a file of at most 2 bytes a pixel of such a job starts none; ``--device gpu``,
    3-D runs, runs on several GPUs and larger files do."""
    fake_gpu[0].set()  # (the run's own probe, if any: no device, at once)
    small, large = _small_and_large(tmp_path)
    starts = _align_starts(monkeypatch, tmp_path, small if which == "small" else large, *extra)
    assert starts == ([(True, {"fft": True})] if started else [])  # (align: cuFFT too)
    assert (_first_run._warm_up is not None) == started
    assert not _first_run._warm_up_held  # (held for that command only)


def test_the_input_is_the_path_argument_wherever_it_is(fake_gpu, monkeypatch, tmp_path):
    """The small-job test reads the command's parsed PATH: after the options, or with a file
    given to ``--reference`` before it."""
    fake_gpu[0].set()
    small, large = _small_and_large(tmp_path)
    assert _align_starts(monkeypatch, tmp_path, "-q", "--max-shift", "8", small) == []
    assert _align_starts(monkeypatch, tmp_path, "--reference", small, large) == [
        (True, {"fft": True})]
    assert _align_starts(monkeypatch, tmp_path, "--reference", large, small) == []


def test_small_job_file(tmp_path):
    small, large = _small_and_large(tmp_path)
    assert _first_run.small_job_file(small) and not _first_run.small_job_file(large)
    assert not _first_run.small_job_file(str(tmp_path)) and not _first_run.small_job_file(None)


def test_the_device_commands_are_those_with_a_device_option():
    for name in _main.COMMANDS:
        command = _main.cli.get_command(None, name)
        with_device = any(p.name == "device" for p in command.params)
        assert isinstance(command, _main.DeviceCommand) == with_device, name


def test_align_decides_its_automatic_choices_while_cuda_starts(fake_gpu, monkeypatch, tmp_path):
    """``xcorr align`` (device auto) opens the stack and makes its automatic choices before it
    waits for the warm-up (here the warm-up waits for them: a run that waited first would
    hang); the run decides the device once, and a GPU found unusable is noted once, after it.
    (The sample stands in for a stack too large for the CPU, whose align starts the warm-up.)"""
    from xcorr_app.alignment import _run

    from sample_paths import stack_path

    release, seen = fake_gpu
    decided = []
    resolve_auto = _run.resolve_auto

    def first_the_choices(opts, src):
        decided.append(_first_run._warm_up.is_alive())
        release.set()
        return resolve_auto(opts, src)

    monkeypatch.setattr(_run, "resolve_auto", first_the_choices)
    monkeypatch.setattr(_first_run, "SMALL_JOB_PIXELS", 0)  # (no job is small)
    res = CliRunner().invoke(_main.cli, ["align", str(stack_path("cell")), "--out",
                                         str(tmp_path / "out"), "--no-aligned"])
    assert res.exit_code == 0, res.output
    assert decided == [True] and seen == ["xcorr-gpu-warm-up"]
    assert res.output.count("note: no usable GPU (CuPy found no CUDA device); running on the "
                            "CPU") == 1
    assert (tmp_path / "out" / "shifts.csv").exists()


def test_a_small_job_under_auto_never_probes_the_gpu(fake_gpu, tmp_path):
    """The cell sample under device auto where a GPU is likely: measured on the CPU by choice,
    with neither the warm-up nor the probe after the run (each imports CuPy and starts CUDA:
    a large share of the whole run)."""
    from sample_paths import stack_path

    release, seen = fake_gpu
    release.set()
    res = CliRunner().invoke(_main.cli, ["align", str(stack_path("cell")), "--out",
                                         str(tmp_path / "out"), "--no-aligned"])
    assert res.exit_code == 0, res.output
    assert seen == [] and _first_run._warm_up is None
    assert not _first_run._warm_up_held  # (held for that command only)
    assert "no usable GPU" not in res.output
    assert "measured on the CPU" in (tmp_path / "out" / "shifts.json").read_text()


@pytest.mark.parametrize("devices", [0, 1])
def test_an_align_warm_up_also_loads_cufft_where_a_device_is_usable(monkeypatch, devices):
    """``start_gpu_warm_up(fft=True)`` (``xcorr align``'s) loads cuFFT in the thread after
    the probe, and the probe's answer waits for it; without a usable device it is not
    touched."""
    loaded = []

    class _One:
        def sum(self):
            return self

        def item(self):
            return 0.0

    cufft = types.ModuleType("cupy.cuda.cufft")
    cufft.getVersion = lambda: loaded.append(threading.current_thread().name) or 11000
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.ModuleType("cupy.cuda")
    cupy.cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: devices)
    cupy.cuda.cufft = cufft
    cupy.float32 = "float32"
    cupy.zeros = lambda *a, **k: _One()
    for name, mod in (("cupy", cupy), ("cupy.cuda", cupy.cuda), ("cupy.cuda.cufft", cufft)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(_first_run, "gpu_likely", lambda: True)
    monkeypatch.setattr(backend, "_warned_fallback", True)
    _fresh(monkeypatch)
    try:
        assert _first_run.start_gpu_warm_up(fft=True)
        _first_run._warm_up.join(10)
        assert backend.gpu_available() is bool(devices)
        assert loaded == (["xcorr-gpu-warm-up"] if devices else [])
    finally:
        _first_run.probe_gpu.cache_clear()


class FakeDriver:
    """libcuda's three calls of :func:`_first_run.start_cuda_driver`, each answering ``codes``'
    value (0: success) and recording its arguments."""

    def __init__(self, **codes):
        self.codes, self.calls = codes, []

    def __getattr__(self, name):
        def call(*args):
            self.calls.append((name, [getattr(a, "_obj", a) for a in args]))
            return self.codes.get(name, 0)
        return call


@pytest.mark.parametrize("codes, started, last", [
    ({}, True, "cuDevicePrimaryCtxRetain"),
    ({"cuInit": 100}, False, "cuInit"),  # (CUDA_ERROR_NO_DEVICE)
    ({"cuDevicePrimaryCtxRetain": 2}, False, "cuDevicePrimaryCtxRetain"),
])
def test_the_driver_start_retains_the_devices_primary_context(monkeypatch, codes, started,
                                                              last):
    import ctypes

    driver = FakeDriver(**codes)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: driver)
    assert _first_run.start_cuda_driver(1) is started
    assert driver.calls[-1][0] == last
    assert driver.calls[0] == ("cuInit", [0])
    if started:
        assert driver.calls[1][1][1] == 1  # device ordinal 1's context


def test_no_driver_library_is_no_start(monkeypatch):
    import ctypes

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert _first_run.start_cuda_driver() is False


def test_the_warm_up_starts_the_driver_beside_cupys_import(fake_gpu, monkeypatch):
    release, seen = fake_gpu
    started = threading.Event()
    monkeypatch.setattr(_first_run, "start_cuda_driver",
                        lambda: (seen.append(threading.current_thread().name), started.set()))
    assert _first_run.start_gpu_warm_up()
    assert started.wait(10)  # while the warm-up still waits in CuPy
    assert _first_run._warm_up.is_alive()
    release.set()
    _first_run._warm_up.join(10)
    assert sorted(seen) == ["xcorr-cuda-driver", "xcorr-gpu-warm-up"]


@pytest.mark.parametrize("extra, want", [
    (["--gpus", "0,2"], [[0, 2]]), (["--gpus=3"], [[3]]), (["--gpus", "a,b"], []),
    (["--gpus", "all"], "large"), ([], [])])
def test_gpus_named_start_their_contexts_too(fake_gpu, monkeypatch, tmp_path, extra, want):
    """``--gpus`` starts the contexts of the GPUs it names beside the warm-up's; ``all`` only
    for a file large enough to be shared out (a bad list: the option's own check says so)."""
    from xcorr_app.streaming import SCALE_OUT_MIN_BYTES

    fake_gpu[0].set()
    calls = []  # (None: every device)
    monkeypatch.setattr(_first_run, "start_cuda_drivers", lambda *a: calls.append(*a or [None]))
    small = tmp_path / "small.tif"
    small.write_bytes(b"\0" * 1000)
    large = tmp_path / "large.tif"
    with open(large, "wb") as f:  # (sparse: no disk written)
        f.truncate(SCALE_OUT_MIN_BYTES)
    for path in (small, large):
        expected = want if want != "large" else ([None] if path == large else [])
        for args in ([str(path), *extra], [*extra, str(path)]):  # (any order)
            calls.clear()
            _align_starts(monkeypatch, tmp_path, *args)
            assert calls == expected, args


def test_start_cuda_drivers_starts_each_named_gpu_but_0_once(monkeypatch):
    seen = []
    monkeypatch.setattr(_first_run, "start_cuda_driver", seen.append)
    _first_run.start_cuda_drivers([0, 2, 2, 1])
    for t in threading.enumerate():
        if t.name.startswith("xcorr-cuda-driver-"):
            t.join(5)
    assert sorted(seen) == [1, 2]


def test_small_jobs_go_to_the_cpu_with_a_note():
    dev, note = auto_device(12, (120, 160), kernels_built=True)
    assert dev == "cpu" and "12 frames of 120x160" in note and "device='gpu'" in note
    dev, note = auto_device(1, (64, 64), kernels_built=False)
    assert dev == "cpu" and "not built yet" in note and "xcorr info --compile" in note


def test_limits_depend_on_whether_the_kernels_are_built():
    side = 1024
    n_small = SMALL_JOB_PIXELS // side ** 2
    assert auto_device(n_small, (side, side), True)[0] == "cpu"
    assert auto_device(n_small + 1, (side, side), True) == ("gpu", None)
    assert auto_device(n_small + 1, (side, side), False)[0] == "cpu"
    n_first = FIRST_RUN_PIXELS // side ** 2
    assert auto_device(n_first, (side, side), False)[0] == "cpu"
    assert auto_device(n_first + 1, (side, side), False) == ("gpu", None)


def test_small_job_note_only_where_a_gpu_is_likely(monkeypatch):
    monkeypatch.setattr(_first_run, "gpu_likely", lambda: True)
    assert "measured on the CPU: 12 frames of 120x160" in small_job_note(12, (120, 160))
    assert small_job_note(64, (512, 512)) is None  # larger than SMALL_JOB_PIXELS: look first
    monkeypatch.setattr(_first_run, "gpu_likely", lambda: False)
    assert small_job_note(12, (120, 160)) is None  # no GPU likely: the ordinary fallback


def test_gpu_likely_needs_cupy_and_a_device_node(monkeypatch, tmp_path):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert _first_run.gpu_likely() is False
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(_first_run, "NVIDIA_DEVICE_NODES", (str(tmp_path / "nvidiactl"),))
    assert _first_run.gpu_likely() is False
    (tmp_path / "nvidiactl").write_text("")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert _first_run.gpu_likely() is True
    for hidden in ("", "-1", " "):  # every device hidden: no GPU to expect
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert _first_run.gpu_likely() is False
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert _first_run.gpu_likely() is True


def test_the_first_run_machinery_imports_neither_numpy_nor_cupy():
    """The command line may start it before anything heavy is imported."""
    code = ("import sys; import xcorr_app._first_run\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'cupy')))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=child_env(), timeout=60)
    assert res.stdout.strip() == "[]", res.stderr
