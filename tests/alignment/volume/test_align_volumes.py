"""align_volumes on volumes built from real images: accuracy against the known shifts and
against scikit-image's 3-D phase_cross_correlation, the options, and bad inputs."""

import numpy as np
import pytest
from scipy import ndimage as ndi
from skimage.registration import phase_cross_correlation

from xcorr_app.alignment import align_volumes
from xcorr_app.alignment.volume import parse_max_shift
from xcorr_app.errors import InputError

from volume_samples import random_shifts, shifted_stack, volume

STACKS = [("camera", "coins"), ("moon", "astronaut"), ("brick", "camera")]


def rms(error):
    return np.sqrt((error[1:] ** 2).mean(axis=0))  # (volume 0 is the reference)


@pytest.mark.parametrize("names", STACKS)
def test_accuracy_real_volumes(names):
    true = random_shifts(8, seed=len(names[0]))
    stack = shifted_stack(volume(names), true, photons=50.0, seed=3)
    result = align_volumes(stack, max_shift=(5, 8, 8), device="cpu")
    ours = rms(result.shifts + true)  # the shift to apply undoes the one made
    theirs = rms(np.array([phase_cross_correlation(stack[0], v, upsample_factor=20)[0]
                           for v in stack]) + true)
    assert (ours <= 0.1).all(), ours
    assert (ours <= 1.05 * theirs).all(), (ours, theirs)
    assert result.verified.all() and not result.at_bound.any()
    assert result.peak[0] == pytest.approx(1.0) and (result.peak[1:] > 0.5).all()


def test_chunks_and_references_agree():
    true = random_shifts(5, seed=4)
    stack = shifted_stack(volume(depth=16, size=32), true, photons=200.0)
    whole = align_volumes(stack, device="cpu")
    voxels = 16 * 32 * 32
    chunked = align_volumes(stack, device="cpu", memory_limit=80 * voxels)  # 1 per chunk
    assert "1 volume(s) per chunk" in chunked.notes[1]
    np.testing.assert_allclose(chunked.shifts, whole.shifts, atol=1e-9)
    # another reference moves every shift by the same amount (nearly noise-free: the mean of
    # unaligned volumes is a blurred template, whose peak noise moves by tenths of a voxel)
    stack = shifted_stack(volume(depth=16, size=32), true, photons=1e5)
    for reference, name in [(2, "volume 2"), ("mean", "the mean of the 5 volumes")]:
        other = align_volumes(stack, reference=reference, device="cpu")
        assert other.notes[0] == f"reference: {name}"
        np.testing.assert_allclose(other.shifts - other.shifts[0], -true, atol=0.01)


def test_bound_voxel_size_and_table():
    true = np.array([[0, 0, 0], [2.3, 0.5, -1.0]])
    stack = shifted_stack(volume(depth=16, size=32), true, photons=500.0)
    result = align_volumes(stack, max_shift=(1, 3, 3), voxel_size=(2.0, 0.5, 0.5),
                           device="cpu")
    assert result.at_bound.tolist() == [False, True]
    assert abs(result.shifts[1, 0]) <= 1.75  # never searched past the bound (+ subvoxel)
    assert any("border" in n for n in result.notes)
    np.testing.assert_allclose(result.shifts_um, result.shifts * [2.0, 0.5, 0.5])
    lines = result.to_csv().splitlines()
    assert lines[0] == "t,dz,dy,dx,peak,confidence,at_bound,verified,dz_um,dy_um,dx_um"
    assert len(lines) == 3


def test_input_is_not_modified():
    stack = shifted_stack(volume(depth=8, size=16), random_shifts(2), photons=100.0)
    before = stack.copy()
    align_volumes(stack, device="cpu")
    np.testing.assert_array_equal(stack, before)


def test_path_input(tmp_path):
    stack = shifted_stack(volume(depth=8, size=16), [[0, 0, 0], [1, 0, 0]], photons=1e4)
    np.save(tmp_path / "v.npy", stack)
    result = align_volumes(tmp_path / "v.npy", upsample=1, device="cpu")
    assert result.shifts[1].tolist() == [-1.0, 0.0, 0.0]


@pytest.mark.parametrize("kwargs, message", [
    ({"stack": np.zeros((4, 8, 8))}, "expected (T, Z, Y, X)"),
    ({"stack": np.zeros((2, 1, 8, 8))}, "2 or more samples"),
    ({"stack": np.zeros((2, 4, 8, 8), complex)}, "real numbers"),
    ({"reference": 5}, "outside the stack's 2 volumes"),
    ({"reference": "last"}, "use 'first', 'mean'"),
    ({"max_shift": (1, 2)}, "three (dz, dy, dx)"),
    ({"max_shift": -1}, "whole number >= 0"),
    ({"max_shift": float("nan")}, "whole number >= 0"),
    ({"max_shift": (1, float("inf"), 2)}, "whole number >= 0"),
    ({"stack": np.zeros((2, 4, 3, 8))}, "at least 4"),
    ({"voxel_size": (1, 0, 1)}, "three positive sizes"),
    ({"upsample": 0.5}, "a number from 1 to 100"),
    ({"device": "tpu"}, "unknown device"),
    ({"stack": "/nonexistent/v.npy"}, "no such file"),
    ({"memory_limit": 1000}, "needs about 0 MiB to register, 0 MiB allowed"),
    ({"max_shfit": 2}, "unknown option 'max_shfit'; did you mean max_shift?"),  # (TypeError)
    ({"reference": np.zeros((4, 8, 8))}, "reference an array of shape (4, 8, 8): use"),
])
def test_bad_inputs(kwargs, message):
    args = {"stack": np.ones((2, 4, 8, 8)), "device": "cpu", **kwargs}
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        align_volumes(**args)


def test_non_finite_volume_is_named():
    stack = np.random.default_rng(0).random((3, 4, 8, 8)).astype(np.float32)  # (not constant)
    stack[2, 1, 1, 1] = np.nan
    with pytest.raises(InputError, match="volume 2 of the stack has NaN"):
        align_volumes(stack, device="cpu")


def test_parse_max_shift_per_axis():
    assert parse_max_shift((0, None, 4)) == (0, None, 4)


def test_bounded_peak_reads_whole_axes_in_place_and_wraps_the_knock_out():
    """Whole axes: the circular index is the lag (negative past the positive lags), the peak's
    neighbourhood is knocked out around the circle; a bounded axis: a window, as before."""
    from xcorr_app.alignment.volume._dft3 import bounded_peak

    corr = np.zeros((2, 7, 8, 9))
    corr[0, 6, 0, 8] = 5.0          # lags (-1, 0, -1)
    corr[0, 0, 1, 0] = 4.0          # across the wrap, within 2 of the peak: knocked out
    corr[0, 3, 4, 4] = 2.0          # the runner-up
    corr[1, 2, 3, 1] = 3.0          # lags (2, 3, 1)
    shifts, peak, rest = bounded_peak(corr.copy(), None)
    assert shifts.tolist() == [[-1, 0, -1], [2, 3, 1]]
    assert peak.tolist() == [5.0, 3.0] and rest.tolist() == [2.0, 0.0]
    shifts, peak, _ = bounded_peak(corr.copy(), (1, None, 1))  # window on z and x
    assert shifts.tolist()[0] == [-1, 0, -1] and peak[1] < 3.0


@pytest.mark.parametrize("shape", [(5, 6, 7), (4, 9, 8)])
def test_samples3d_equal_the_correlation_by_its_definition(shape):
    """All volumes at once, each at its own centres: the circular correlation of the half
    spectra summed directly over every frequency (float64), at subvoxel lags."""
    from xcorr_app.alignment.volume._dft3 import cross_spectra, samples3d, spectrum

    rng = np.random.default_rng(7)
    ref, vols = rng.random(shape), rng.random((2,) + shape)
    product = cross_spectra(spectrum(ref[None], np)[0], vols)
    full = np.conj(np.fft.fftn(vols - vols.mean(axis=(1, 2, 3), keepdims=True), axes=(1, 2, 3))) \
        * np.fft.fftn(ref - ref.mean())
    centres = np.array([[1.0, -2.0, 0.0], [-1.0, 0.0, 2.0]])
    got = samples3d(product, shape, centres, 0.3, 3)
    freqs = np.meshgrid(*[np.fft.fftfreq(n) for n in shape], indexing="ij")
    for b in range(2):
        for i, j, k in np.ndindex(3, 3, 3):
            lag = centres[b] + (np.array([i, j, k]) - 1) * 0.3
            if any(n % 2 == 0 for n in shape):  # (the half spectrum leaves Nyquist out)
                keep = np.ones(shape, bool)
                for a, n in enumerate(shape):
                    if n % 2 == 0:
                        keep &= np.abs(freqs[a]) != 0.5
            else:
                keep = np.ones(shape, bool)
            phase = np.exp(2j * np.pi * sum(f * s for f, s in zip(freqs, lag)))
            want = (full[b] * phase * keep).sum().real / np.prod(shape)
            assert got[b, i, j, k] == pytest.approx(want, abs=1e-5)


def test_samples3d_in_sub_batches_equal_one_batch(monkeypatch):
    """Thin volumes: the samples are made a few volumes at a time, the same numbers."""
    from xcorr_app.alignment.volume import _dft3
    from xcorr_app.alignment.volume._dft3 import cross_spectra, samples3d, spectrum

    rng = np.random.default_rng(3)
    shape = (6, 7, 5)
    product = cross_spectra(spectrum(rng.random(shape)[None], np)[0], rng.random((5,) + shape))
    centres = rng.integers(-2, 3, (5, 3)).astype(float)
    whole = samples3d(product, shape, centres, 0.25, 3)
    monkeypatch.setattr(_dft3, "SAMPLE_BYTES", 24 * 6 * 7 * 3 * 2)  # two volumes a batch
    np.testing.assert_array_equal(samples3d(product, shape, centres, 0.25, 3), whole)


def test_big_endian_volumes_stream_as_native(tmp_path):
    """A big-endian .npy (memory-mapped): read in native byte order, the same shifts."""
    vol = np.random.default_rng(5).random((8, 12, 10))
    stack = np.stack([vol, np.roll(vol, (1, -2, 1), axis=(0, 1, 2))]) * 1000
    np.save(tmp_path / "be.npy", stack.astype(">u2"))
    want = align_volumes(stack.astype(np.uint16), upsample=1, device="cpu").shifts
    got = align_volumes(tmp_path / "be.npy", upsample=1, device="cpu").shifts
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("suffix", [".npy", ".tif"])
def test_volume_files_are_read_by_read_calls(tmp_path, monkeypatch, suffix):
    """A .npy or TIFF of volumes is copied out of the file by positioned reads (no page
    faults on a memory map), each volume's bytes where the memory map has them; the shifts
    equal those of the array."""
    import tifffile

    from xcorr_app.alignment.volume import open_volumes
    from xcorr_app.io import PreadFile

    stack = shifted_stack(volume(depth=6, size=16), random_shifts(5, seed=3), photons=1e3)
    stack = np.round(stack).astype(np.uint16)
    path = tmp_path / f"v{suffix}"
    np.save(path, stack) if suffix == ".npy" else tifffile.imwrite(path, stack)
    items = open_volumes(path).frames()
    out = np.full((3, *stack.shape[1:]), 7, np.uint16)
    assert items.read(1, 4, out) is out
    np.testing.assert_array_equal(out, stack[1:4])
    calls = []
    original = PreadFile.read_into
    monkeypatch.setattr(PreadFile, "read_into",
                        lambda self, o, at: calls.append(at) or original(self, o, at))
    got = align_volumes(path, upsample=1, device="cpu").shifts
    want = align_volumes(stack, upsample=1, device="cpu").shifts
    np.testing.assert_array_equal(got, want)
    assert calls and calls[0] == items._at  # (the first chunk from the array's first byte)


@pytest.mark.parametrize("reference", ["first", "mean", 2])
def test_decide_boundary_is_what_one_call_decides(reference):
    """``decide_boundary`` takes the vote one ``align_volumes`` call takes (wrap-around volumes:
    circular; volumes cut from a larger scene: linear), and options it decided measure what
    that call measures; decided again, not reused, for another stack."""
    from xcorr_app.alignment import VolumeOptions
    from xcorr_app.alignment.volume import decide_boundary

    vol = volume(depth=16, size=48)
    rng = np.random.default_rng(4)
    wraps = np.stack([np.roll(vol, tuple(s), axis=(0, 1, 2))
                      for s in rng.integers(-3, 4, (6, 3))]).astype(np.float32)
    big = ndi.gaussian_filter(rng.random((28, 64, 64)), 1.5)
    cut = np.stack([big[6 + a:22 + a, 8 + b:56 + b, 8 + c:56 + c]
                    for a, b, c in rng.integers(-4, 5, (6, 3))]).astype(np.float32)
    opts = VolumeOptions(device="cpu", reference=reference, max_shift=6)
    for stack, want in ((wraps, "circular"), (cut, "linear")):
        one = align_volumes(stack, options=opts)
        decided = decide_boundary(stack, opts)
        assert one.boundary == want and decided.boundary == "auto"
        assert decided.vote.wraps == (want == "circular")
        again = align_volumes(stack, options=decided)
        assert again.boundary == want
        np.testing.assert_array_equal(again.shifts, one.shifts)
    other = decide_boundary(cut, decide_boundary(wraps, opts))
    assert not other.vote.wraps  # (the cut stack's own vote)
    assert decide_boundary(cut, VolumeOptions(device="cpu", boundary="linear")).vote is None


def test_decide_boundary_calls_between_its_reads():
    from xcorr_app.alignment import VolumeOptions
    from xcorr_app.alignment.volume import decide_boundary

    # a stack that does not move: no volume tells (none wraps around), every one is read
    flat = np.repeat(volume(depth=8, size=16)[None], 30, axis=0).astype(np.float32)
    calls = []
    decide_boundary(flat, VolumeOptions(device="cpu"), between=lambda: calls.append(1))
    assert len(calls) >= 2

    class Stop(Exception):
        pass

    def stop():
        raise Stop

    with pytest.raises(Stop):
        decide_boundary(flat, VolumeOptions(device="cpu"), between=stop)


def test_patches_as_the_command_line_writes_them():
    """``--patches`` reaches the options as text: ``N`` is NxNxN for volumes (NxN in 2-D)."""
    from xcorr_app.alignment import AlignOptions, VolumeOptions

    assert VolumeOptions(patches="2").patches == (2, 2, 2)
    assert VolumeOptions(patches="1x4x3").patches == (1, 4, 3)
    assert AlignOptions(patches="3").patches == (3, 3)
    for bad in ("2x", "0x2x2", "x"):
        with pytest.raises(InputError, match="patches"):
            VolumeOptions(patches=bad)


@pytest.mark.parametrize("reference, own", [("first", 0), (2, 2), (-1, 3)])
def test_the_reference_volume_itself_gets_exactly_no_shift(reference, own):
    """Its fit's rounding (1e-9 voxel) was resampled: with fill NaN a plane of the reference
    came out NaN."""
    stack = shifted_stack(volume(depth=8, size=16), [[0, 0, 0], [1, 0.4, 0], [0, -1, 0.6],
                                                      [0.3, 0, 1]], photons=1e4)
    shifts = align_volumes(stack, reference=reference, device="cpu").shifts
    assert shifts[own].tolist() == [0.0, 0.0, 0.0]


def test_a_volume_without_a_shift_is_left_where_it_is():
    """A constant volume's NaN shifts (the documented result) made shift_volumes and
    refine_planes refuse the whole result; it is left unshifted, its planes NaN."""
    from xcorr_app.alignment.volume import refine_planes, shift_volumes

    rng = np.random.default_rng(3)
    base = ndi.gaussian_filter(rng.random((12, 32, 32)), 2).astype(np.float32)
    stack = np.stack([ndi.shift(base, (0.3 * k, 0.5 * k, -0.4 * k), order=1, mode="nearest")
                      for k in range(4)])
    stack[2] = 5.0
    res = align_volumes(stack, device="cpu")
    assert np.isnan(res.shifts[2]).all() and np.isfinite(res.shifts[[0, 1, 3]]).all()
    moved = list(shift_volumes(stack, res.shifts, device="cpu"))
    np.testing.assert_array_equal(moved[2], stack[2])
    np.testing.assert_array_equal(moved[1], next(shift_volumes(stack[1:2], res.shifts[1:2],
                                                               device="cpu")))
    planes = refine_planes(stack, res.shifts, max_shift=3, device="cpu")
    assert np.isnan(planes[2]).all() and np.isfinite(planes[1]).any()
    half = res.shifts.copy()
    half[1, 0] = np.nan  # (a shift with only some of dz, dy, dx: still refused)
    with pytest.raises(InputError, match="NaN in all three"):
        list(shift_volumes(stack, half, device="cpu"))


def test_the_files_voxel_size_gives_the_shifts_in_micrometers(tmp_path):
    """A hyperstack saying its pixel size and Z step: the shifts in micrometers came only with
    voxel_size given (shifts.csv had no dz_um, dy_um, dx_um); one given apart from the file's
    is used and the note says so."""
    import tifffile

    rng = np.random.default_rng(5)
    vols = (ndi.gaussian_filter(rng.random((3, 8, 32, 32)), (0, 1, 2, 2)) * 1000).astype(
        np.float32)
    path = tmp_path / "v.tif"
    tifffile.imwrite(path, vols, imagej=True, resolution=(1 / 0.25, 1 / 0.25),
                     metadata={"axes": "TZYX", "spacing": 0.5, "unit": "nm"})
    res = align_volumes(path, device="cpu")
    assert res.voxel_size == pytest.approx((0.0005, 0.00025, 0.00025))  # (nm -> µm)
    assert res.notes[-1].startswith("voxel size from the file: 0.0005 x 0.00025 x 0.00025 µm")
    np.testing.assert_allclose(res.shifts_um, res.shifts * [0.0005, 0.00025, 0.00025])
    given = align_volumes(path, device="cpu", voxel_size=(2, 1, 1))
    assert given.voxel_size == (2.0, 1.0, 1.0) and "is not the file's" in given.notes[-1]
    assert align_volumes(vols, device="cpu").voxel_size is None
