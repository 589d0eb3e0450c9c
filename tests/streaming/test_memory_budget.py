"""The memory budget (xcorr_app.streaming._memory_budget): the per-frame need per device, the
up-front check and its advice, the chunk caps, the switch to bands, and the host's available
memory (xcorr_app.backend.host_available_bytes)."""

import tracemalloc

import numpy as np
import pytest

from xcorr_app import backend
from xcorr_app.errors import InputError
from xcorr_app.streaming import frame_need, human, plan_memory
from xcorr_app.streaming import _memory_budget as mb

SHAPE = (301, 257)


def test_need_terms_per_device():
    cpu = frame_need(SHAPE, 2, max_shift=(6, 6), verify=False)
    gpu = frame_need(SHAPE, 2, max_shift=(6, 6), verify=False, device="gpu")
    px = SHAPE[0] * SHAPE[1]
    assert cpu.device == 0 and gpu.host == (mb.READ_AHEAD + 1) * 2 * px
    # the GPU holds the working set and the chunk's uploads; the CPU holds it all on the host
    assert gpu.device == cpu.host - gpu.host + mb.UPLOAD_COPIES * 2 * px
    verified = frame_need(SHAPE, 2, max_shift=(6, 6), verify=True)
    assert verified.total - cpu.total == mb.VERIFY_BYTES_PER_PIXEL * px
    unbounded = frame_need(SHAPE, 2, max_shift=None, verify=False)
    assert unbounded.total > cpu.total + mb.BYTES_PER_OUTPUT * px  # the FFT and a big surface


def test_bands_need_less_and_grow_with_their_rows():
    whole = frame_need(SHAPE, 2, max_shift=(6, 6)).total
    needs = [frame_need(SHAPE, 2, max_shift=(6, 6), band_rows=r).total for r in (1, 10, 100)]
    assert needs == sorted(needs) and needs[-1] < whole
    assert needs[1] - needs[0] == 9 * SHAPE[1] * mb.CORRELATION_BYTES_PER_PIXEL


def test_chunks_fit_the_budget_and_the_caps(monkeypatch):
    monkeypatch.setenv("XCORR_THREADS", "1")
    need = frame_need(SHAPE, 2, max_shift=(6, 6)).total
    plan = plan_memory(SHAPE, 2, max_shift=(6, 6), budget=10 * need + 1)
    assert plan.chunk_frames == 10 and plan.band_rows is None
    assert plan_memory(SHAPE, 2, max_shift=(6, 6), budget=10 * need, limit=4).chunk_frames == 4
    # the GPU's automatic cap: a share of its free memory
    gpu = frame_need(SHAPE, 2, max_shift=(6, 6), device="gpu")
    plan = plan_memory(SHAPE, 2, max_shift=(6, 6), device="gpu", device_free=20 * gpu.device)
    assert plan.chunk_frames == int(mb.AUTO_DEVICE_SHARE * 20)
    # the CPU's: a share of the host's available memory, and at most CPU_AUTO_BUDGET
    assert plan_memory(SHAPE, 2, max_shift=(6, 6), host_free=8 * need).chunk_frames == \
        int(mb.AUTO_HOST_SHARE * 8)
    big = (1500, 1500)
    want = mb.CPU_AUTO_BUDGET // frame_need(big, 2, max_shift=(6, 6)).total
    assert 1 < want < 64 and plan_memory(big, 2, max_shift=(6, 6)).chunk_frames == want
    # the CPU's chunk: within CPU_AUTO_BUDGET, a multiple of the threads where it holds more
    for threads in (2, 3, 16):
        monkeypatch.setenv("XCORR_THREADS", str(threads))
        n = plan_memory(big, 2, max_shift=(6, 6)).chunk_frames
        assert n == (want if want < threads else want - want % threads)
        n = plan_memory(SHAPE, 2, max_shift=(6, 6), budget=10 * need + 1).chunk_frames
        assert n == (10 // threads) * threads or (threads > 10 and n == 10)


def test_a_bounded_search_that_does_not_fit_whole_runs_in_bands():
    whole = frame_need(SHAPE, 2, max_shift=(6, 6)).total
    budget = whole - 1
    plan = plan_memory(SHAPE, 2, max_shift=(6, 6), budget=budget)
    assert plan.chunk_frames == 1 and plan.band_rows is not None
    assert plan.need.total <= budget
    assert frame_need(SHAPE, 2, max_shift=(6, 6), band_rows=plan.band_rows + 1).total > budget
    # the GPU's free memory bounds them too
    gpu = frame_need(SHAPE, 2, max_shift=(6, 6), device="gpu").device
    plan = plan_memory(SHAPE, 2, max_shift=(6, 6), device="gpu", device_free=gpu - 1)
    assert plan.band_rows is not None and plan.need.device < gpu
    # bands are at most BAND_ROWS rows
    big = (5000, 300)
    need = frame_need(big, 2, max_shift=(2, 2)).total
    assert plan_memory(big, 2, max_shift=(2, 2), budget=need - 1).band_rows == mb.BAND_ROWS


@pytest.mark.parametrize("kw", [dict(max_shift=None), dict(max_shift=(6, 6), normalization="phase")])
def test_unbounded_and_phase_searches_have_no_bands(kw):
    whole = frame_need(SHAPE, 2, max_shift=kw["max_shift"]).total
    with pytest.raises(InputError, match="max_memory"):
        plan_memory(SHAPE, 2, budget=whole - 1, **kw)


@pytest.mark.parametrize("max_shift", [None, (6, 6)])
@pytest.mark.parametrize("verify", [True, False])
def test_the_max_memory_refusal_names_what_helps_and_nothing_given(max_shift, verify):
    with pytest.raises(InputError) as err:
        plan_memory(SHAPE, 2, max_shift=max_shift, verify=verify, budget=100_000)
    msg = str(err.value)
    assert "\n" not in msg
    least = frame_need(SHAPE, 2, max_shift=max_shift, verify=verify,
                       band_rows=None if max_shift is None else 1)
    assert msg.startswith(f"max_memory {human(100_000)} is too small for frames of 301x257: "
                          f"one frame needs at least {human(least.total)}")
    assert ("max_shift=N" in msg) == (max_shift is None)
    assert ("verify=False" in msg) == verify
    assert f"max_memory={human(least.total)} or more" in msg
    assert "--device" not in msg


def test_the_gpu_refusal_advises_the_cpu_only_when_the_host_has_the_memory():
    kw = dict(max_shift=(6, 6), verify=False, device="gpu", device_free=1000)
    cpu = frame_need(SHAPE, 2, max_shift=(6, 6), verify=False, band_rows=1).total
    with pytest.raises(InputError, match="do not fit on the GPU") as err:
        plan_memory(SHAPE, 2, host_free=10 * cpu, **kw)
    assert "device='cpu'" in str(err.value) and "max_memory" not in str(err.value)
    assert "1000 B is free" in str(err.value)
    with pytest.raises(InputError) as err:
        plan_memory(SHAPE, 2, host_free=cpu // 2, **kw)
    assert "device='cpu'" not in str(err.value)
    assert "a machine with more memory" in str(err.value)


def test_the_host_refusal_gives_both_figures():
    need = frame_need(SHAPE, 2, max_shift=None).total
    with pytest.raises(InputError) as err:
        plan_memory(SHAPE, 2, host_free=4096)
    assert str(err.value).startswith(f"frames of 301x257 do not fit in memory: one frame needs "
                                     f"at least {human(need)}, and 4 KiB is available; try ")
    assert "max_memory" not in str(err.value)


def test_host_available_bytes_reads_memavailable(tmp_path):
    info = tmp_path / "meminfo"
    info.write_text("MemTotal:       1000 kB\nMemFree:  10 kB\nMemAvailable:    512 kB\n")
    assert backend.host_available_bytes(info) == 512 * 1024
    # without the file: the free pages, or None where the system does not say
    n = backend.host_available_bytes(tmp_path / "missing")
    assert n is None or n > 0


def test_the_cpu_estimate_covers_what_a_run_allocates(rng):
    """The estimate is generous: a CPU run of one 384x320 frame at a time allocates (NumPy's
    traced arrays at their peak) less than the frame need says, bounded and unbounded."""
    from xcorr_app import align

    stack = (rng.random((2, 384, 320)) * 1000).astype(np.uint16)
    for max_shift in (6, None):
        align(stack[:, :32, :32], max_shift=max_shift, device="cpu")  # warm caches
        tracemalloc.start()
        try:
            align(stack, max_shift=max_shift, device="cpu", chunk_frames=1)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        bound = None if max_shift is None else (max_shift, max_shift)
        need = frame_need(stack.shape[1:], 2, max_shift=bound).total
        assert peak < need, (max_shift, peak, need)
