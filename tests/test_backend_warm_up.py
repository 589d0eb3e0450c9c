"""The GPU warm-up: CuPy's import and the CUDA context started in a background thread by the
commands' ``--device`` option, the caller going on at once, the probe waiting for it."""

import sys
import threading
import types

import click
from click.testing import CliRunner
import pytest

from xcorr_app import backend
from xcorr_app.cli._options import DEVICE


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
    monkeypatch.setattr(backend, "gpu_likely", lambda: True)
    monkeypatch.setattr(backend, "_warm_up", None)
    monkeypatch.setattr(backend, "_warm_up_held", False)
    monkeypatch.setattr(backend, "_warned_fallback", True)  # (no warning to filter)
    backend._probe_gpu.cache_clear()
    yield release, seen
    release.set()
    if backend._warm_up is not None:
        backend._warm_up.join(10)
    backend._probe_gpu.cache_clear()


def test_the_caller_goes_on_and_the_probe_waits_for_the_warm_up(fake_gpu):
    release, seen = fake_gpu
    assert backend.start_gpu_warm_up()  # returns while the warm-up is still in CuPy
    assert not backend.start_gpu_warm_up()  # once a process
    assert backend._warm_up.is_alive()
    release.set()
    assert backend.resolve_device("auto") == "cpu"
    assert seen == ["xcorr-gpu-warm-up"]  # the probe's work was the thread's, not redone
    assert "no CUDA device" in backend.gpu_unavailable_reason()


def test_no_warm_up_where_no_gpu_is_likely(fake_gpu, monkeypatch):
    monkeypatch.setattr(backend, "gpu_likely", lambda: False)
    assert not backend.start_gpu_warm_up() and backend._warm_up is None


@pytest.mark.parametrize("device, started", [("cpu", False), ("auto", True), ("gpu", True)])
def test_the_device_option_starts_it(fake_gpu, device, started):
    @click.command()
    @DEVICE
    def cmd(device):
        click.echo(f"ran {device} warm-up={backend._warm_up is not None}")

    fake_gpu[0].set()
    out = CliRunner().invoke(cmd, ["--device", device]).output
    assert out == f"ran {device} warm-up={started}\n"


@pytest.mark.parametrize("args, started", [
    (["align", "s.tif"], True), (["zlocate", "m.tif", "--zstack", "z.tif"], True),
    (["align", "s.tif", "--device", "cpu"], False), (["align", "s.tif", "--device=cpu"], False),
    (["align", "--help"], False), (["info"], False), (["bench", "align", "--help"], False)])
def test_a_gpu_command_starts_it_before_its_imports(fake_gpu, monkeypatch, args, started):
    from xcorr_app.cli import _main

    events = []
    monkeypatch.setattr(backend, "start_gpu_warm_up", lambda **k: events.append("warm-up"))
    get_command = _main.XcorrGroup.get_command

    def recorded(self, ctx, name):
        events.append(f"import {name}")
        return get_command(self, ctx, name)

    monkeypatch.setattr(_main.XcorrGroup, "get_command", recorded)
    fake_gpu[0].set()  # (the command's own probe: no device, at once)
    CliRunner().invoke(_main.cli, args)
    assert events[:2] == (["warm-up", f"import {args[0]}"] if started else [f"import {args[0]}"])


def _small_and_large(tmp_path):
    small, large = tmp_path / "small.tif", tmp_path / "large.tif"
    small.write_bytes(b"\0" * 1000)
    with open(large, "wb") as f:  # (sparse: no disk written)
        f.truncate(2 * backend.SMALL_JOB_PIXELS + 1)
    return str(small), str(large)


@pytest.mark.parametrize("which, extra, started", [
    ("small", [], False), ("small", ["--device", "auto"], False), ("small", ["--device=auto"], False),
    ("small", ["--device", "gpu"], True), ("small", ["--device=gpu"], True),
    ("small", ["--volumes"], True), ("small", ["--gpus", "0"], True), ("small", ["--gpus=0,1"], True),
    ("large", [], True),
    ("small", ["--device", "gpu", "--device", "auto"], False),  # (click: the last one)
    ("small", ["--device", "auto", "--device=gpu"], True)])
def test_align_of_a_small_file_under_auto_starts_none(fake_gpu, monkeypatch, tmp_path, which,
                                                      extra, started):
    """Device auto aligns a small job on the CPU: the warm-up would only slow it down, so an
    ``align`` of a file of at most 2 bytes a pixel of such a job starts none (nor does its
    ``--device`` option later); ``--device gpu``, 3-D runs and larger files do."""
    from xcorr_app.cli import _main

    small, large = _small_and_large(tmp_path)
    started_now = []
    real = backend.start_gpu_warm_up
    monkeypatch.setattr(backend, "start_gpu_warm_up",
                        lambda **k: started_now.append((real(**k), k)))
    _main._warm_up_early(["align", small if which == "small" else large, *extra])
    assert started_now == ([(True, {"fft": True})] if started else [])  # (align: cuFFT too)
    assert real() is False  # held, or started once
    assert (backend._warm_up is not None) == started


def test_a_small_file_named_after_the_options_starts_none(fake_gpu, monkeypatch, tmp_path):
    from xcorr_app.cli import _main

    small, large = _small_and_large(tmp_path)
    started_now = []
    monkeypatch.setattr(backend, "start_gpu_warm_up", lambda **k: started_now.append(k))
    _main._warm_up_early(["align", "--out", str(tmp_path / "o"), "-q", "--max-shift", "8", small])
    assert started_now == []
    _main._warm_up_early(["align", "--out", str(tmp_path / "o"), large])
    assert started_now == [{"fft": True}]
    assert _main._input_file(["align", "--max-shift", "8", "no-such.tif", large]) == large
    assert _main._input_file(["align", "--reference", small, large]) == large
    assert _main._input_file(["align", large, "--reference", small]) == large
    assert _main._input_file(["align", "-q"]) is None and _main._input_file([]) is None


def test_the_file_options_are_those_of_align_that_take_a_file():
    """FILE_OPTIONS against align's options whose help names a FILE (but --dataset's
    FILE:/DATASET and --channel's, which name no file of their own)."""
    import click

    from xcorr_app.cli import _main

    align = _main.cli.get_command(None, "align")
    named = {o for p in align.params if isinstance(p, click.Option) and not p.is_flag
             and "FILE" in f"{p.metavar} {p.help}".upper() for o in p.opts}
    assert named - {"--dataset", "--channel"} == set(_main.FILE_OPTIONS)


def test_small_job_file(tmp_path):
    small, large = _small_and_large(tmp_path)
    assert backend.small_job_file(small) and not backend.small_job_file(large)
    assert not backend.small_job_file(str(tmp_path)) and not backend.small_job_file(None)


def test_the_gpu_commands_are_those_with_a_device_option():
    from xcorr_app.cli import _main

    with_device = {name for name in _main.COMMANDS
                   if any(p.name == "device" for p in _main.cli.get_command(None, name).params)}
    assert set(_main.GPU_COMMANDS) == with_device


def test_align_decides_its_automatic_choices_while_cuda_starts(fake_gpu, monkeypatch, tmp_path):
    """``xcorr align`` (device auto) opens the stack and makes its automatic choices before it
    waits for the warm-up (here the warm-up waits for them: a run that waited first would
    hang); a GPU found unusable is noted once, after the run.  (The sample stands in for a
    stack too large for the CPU, whose align starts the warm-up.)"""
    from xcorr_app.alignment import _device_choice, _run
    from xcorr_app.cli import _main

    from sample_paths import stack_path

    release, seen = fake_gpu
    decided = []
    resolve_auto = _run.resolve_auto

    def first_the_choices(opts, src):
        decided.append(backend.gpu_pending())
        release.set()
        return resolve_auto(opts, src)

    monkeypatch.setattr(_run, "resolve_auto", first_the_choices)
    monkeypatch.setattr(backend, "small_job_file", lambda path: False)
    monkeypatch.setattr(_device_choice, "small_job_note", lambda n, shape: None)
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
    0.3-0.5 s of the whole run)."""
    from xcorr_app.cli import _main

    from sample_paths import stack_path

    release, seen = fake_gpu
    release.set()
    res = CliRunner().invoke(_main.cli, ["align", str(stack_path("cell")), "--out",
                                         str(tmp_path / "out"), "--no-aligned"])
    assert res.exit_code == 0, res.output
    assert seen == [] and backend._warm_up is None
    assert not backend.warm_up_held()  # (held for that command only)
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
    monkeypatch.setattr(backend, "gpu_likely", lambda: True)
    monkeypatch.setattr(backend, "_warm_up", None)
    monkeypatch.setattr(backend, "_warm_up_held", False)
    monkeypatch.setattr(backend, "_warned_fallback", True)
    backend._probe_gpu.cache_clear()
    try:
        assert backend.start_gpu_warm_up(fft=True)
        backend._warm_up.join(10)
        assert backend.gpu_available() is bool(devices)
        assert loaded == (["xcorr-gpu-warm-up"] if devices else [])
    finally:
        backend._probe_gpu.cache_clear()


class FakeDriver:
    """libcuda's three calls of :func:`backend.start_cuda_driver`, each answering ``codes``'
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
    assert backend.start_cuda_driver(1) is started
    assert driver.calls[-1][0] == last
    assert driver.calls[0] == ("cuInit", [0])
    if started:
        assert driver.calls[1][1][1] == 1  # device ordinal 1's context


def test_no_driver_library_is_no_start(monkeypatch):
    import ctypes

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert backend.start_cuda_driver() is False


def test_the_warm_up_starts_the_driver_beside_cupys_import(fake_gpu, monkeypatch):
    release, seen = fake_gpu
    started = threading.Event()
    monkeypatch.setattr(backend, "start_cuda_driver",
                        lambda: (seen.append(threading.current_thread().name), started.set()))
    assert backend.start_gpu_warm_up()
    assert started.wait(10)  # while the warm-up still waits in CuPy
    assert backend._warm_up.is_alive()
    release.set()
    backend._warm_up.join(10)
    assert sorted(seen) == ["xcorr-cuda-driver", "xcorr-gpu-warm-up"]


@pytest.mark.parametrize("extra, want", [
    (["--gpus", "0,2"], [[0, 2]]), (["--gpus=3"], [[3]]), (["--gpus", "a,b"], []),
    (["--gpus", "all"], "large"), ([], [])])
def test_gpus_named_start_their_contexts_too(monkeypatch, tmp_path, extra, want):
    """``--gpus`` starts the contexts of the GPUs it names beside the warm-up's; ``all`` only
    for a file large enough to be shared out (a bad list: the option's own check says so)."""
    from xcorr_app.cli import _main
    from xcorr_app.streaming import SCALE_OUT_MIN_BYTES

    calls = []  # (None: every device)
    monkeypatch.setattr(backend, "start_cuda_drivers", lambda *a: calls.append(*a or [None]))
    small = tmp_path / "small.tif"
    small.write_bytes(b"\0" * 1000)
    large = tmp_path / "large.tif"
    with open(large, "wb") as f:  # (sparse: no disk written)
        f.truncate(SCALE_OUT_MIN_BYTES)
    for path in (small, large):
        expected = want if want != "large" else ([None] if path == large else [])
        for args in (["align", str(path), *extra], ["align", *extra, str(path)]):  # (any order)
            calls.clear()
            _main._start_named_gpus(args)
            assert calls == expected, args


def test_start_cuda_drivers_starts_each_named_gpu_but_0_once(monkeypatch):
    import threading

    seen = []
    monkeypatch.setattr(backend, "start_cuda_driver", seen.append)
    backend.start_cuda_drivers([0, 2, 2, 1])
    for t in threading.enumerate():
        if t.name.startswith("xcorr-cuda-driver-"):
            t.join(5)
    assert sorted(seen) == [1, 2]
