"""TIFF files read as they are meant (issue 74: a Fiji TZYX hyperstack was aligned as 384 2-D
frames, and a TIFF written a frame at a time as one frame, both exit 0).

A TIFF whose axes hold both T and Z (an ImageJ hyperstack, an OME-TIFF) is volumes: read as 2-D
frames its planes would mix depth with drift.  The API refuses it with one line naming the ways
on; ``xcorr align`` registers it in 3-D as ``--volumes`` does, with a note, where its options
allow, else refuses the same way.  A TIFF of one-page series of one shape (tifffile's writer
called once a frame, as an acquisition loop does) is a stack of those frames."""

import numpy as np
import pytest
import tifffile

from xcorr_app import align
from xcorr_app.errors import InputError
from xcorr_app.io import HoldsVolumes, describe, open_stack, readable_frames

from cli_helpers import assert_clean_error, xcorr
from synthetic import fourier_moved, periodic_texture




@pytest.fixture(scope="module")
def hyperstack(tmp_path_factory):
    """A Fiji-style TZYX hyperstack: 4 time points of 6 planes, moved (0, 0.5t, -0.3t)."""
    rng = np.random.default_rng(7)
    vol = periodic_texture(rng, (6, 40, 44))
    stack = np.stack([fourier_moved(vol, (0, 0.5 * t, -0.3 * t)) for t in range(4)])
    path = tmp_path_factory.mktemp("tz") / "tz.tif"
    tifffile.imwrite(path, (stack * 5e4 + 1000).astype(np.uint16), imagej=True,
                     metadata={"axes": "TZYX"})
    return path


def test_the_api_refuses_volumes_as_frames_and_names_the_ways_on(hyperstack):
    with pytest.raises(HoldsVolumes, match=r"4 time points of 6 Z planes \(axes TZYX\)") as exc:
        align(hyperstack, device="cpu")
    with pytest.raises(HoldsVolumes):
        from xcorr_app import dask as xdask

        xdask.align(hyperstack, device="cpu", scheduler="threads")
    assert isinstance(exc.value, InputError)
    assert "--volumes" in str(exc.value) and "--z K" in str(exc.value)
    with open_stack(f"{hyperstack}?z=2") as src:  # one plane: a time series of frames
        assert (src.n_frames, src.frame_shape) == (4, (40, 44))
    res = align(f"{hyperstack}?z=2", device="cpu", max_shift=4)
    np.testing.assert_allclose(res.shifts, [[0, 0], [-0.5, 0.3], [-1.0, 0.6], [-1.5, 0.9]],
                               atol=0.05)


@pytest.mark.parametrize("axes,shape", [("ZYX", (6, 20, 22)), ("TYX", (4, 20, 22)),
                                        ("TZYX", (1, 6, 20, 22)), ("TZYX", (4, 1, 20, 22))])
def test_a_z_stack_or_a_time_series_of_single_planes_is_frames(tmp_path, axes, shape):
    path = tmp_path / "s.tif"
    tifffile.imwrite(path, np.zeros(shape, np.uint16), imagej=True, metadata={"axes": axes})
    with open_stack(path) as src:
        assert src.n_frames == int(np.prod(shape[:-2]))


def test_the_command_registers_them_in_3d_as_volumes_does(hyperstack, tmp_path):
    auto = xcorr("align", hyperstack, "--out", tmp_path / "auto", "--device", "cpu")
    assert auto.returncode == 0, auto.stderr
    assert "holds volumes (4 time points of 6 Z planes, axes TZYX): registered in 3-D" \
        in auto.stderr
    asked = xcorr("align", hyperstack, "--volumes", "--out", tmp_path / "asked", "--device",
                  "cpu", "-q")
    assert asked.returncode == 0, asked.stderr
    table = (tmp_path / "auto" / "shifts.csv").read_text()
    assert table.startswith("t,dz,dy,dx")
    assert table == (tmp_path / "asked" / "shifts.csv").read_text()
    rows = np.loadtxt(tmp_path / "auto" / "shifts.csv", delimiter=",", skiprows=1,
                      usecols=(1, 2, 3))
    np.testing.assert_allclose(rows, [[0, 0, 0], [0, -0.5, 0.3], [0, -1.0, 0.6],
                                      [0, -1.5, 0.9]], atol=0.02)


@pytest.mark.parametrize("options, named", [(["--normalization", "phase"], "--normalization"),
                                            (["--prefilter", "none", "--no-verify"],
                                             "--no-verify, --prefilter")])
def test_the_command_refuses_them_with_options_volumes_do_not_use(hyperstack, tmp_path, options,
                                                                  named):
    """(Registered in 3-D, they would be dropped without a word.)"""
    res = xcorr("align", hyperstack, *options, "--out", tmp_path / "o", "--device", "cpu")
    assert res.returncode == 2
    assert_clean_error(res, "holds volumes", "--volumes", "--z K", f"({named} do")
    assert "note:" not in res.stderr
    assert not (tmp_path / "o").exists()


def test_a_2d_patch_grid_on_volumes_says_the_3d_one(hyperstack, tmp_path):
    """(Volumes take 3-D patches: a grid of two numbers is not read as one of them.)"""
    res = xcorr("align", hyperstack, "--patches", "2x2", "--out", tmp_path / "o", "--device",
                "cpu")
    assert res.returncode == 2
    assert_clean_error(res, "--patches takes GZxGYxGX with volumes", "got '2x2'")
    assert not (tmp_path / "o").exists()


def test_options_volumes_use_keep_the_route_to_3d(hyperstack, tmp_path):
    res = xcorr("align", hyperstack, "--max-shift", "4", "--upsample", "10", "--reference",
                "mean", "--no-aligned", "--out", tmp_path / "o", "--device", "cpu")
    assert res.returncode == 0, res.stderr
    assert "registered in 3-D" in res.stderr
    assert (tmp_path / "o" / "shifts.csv").read_text().startswith("t,dz,dy,dx")


def test_a_tiff_written_a_frame_at_a_time_is_a_stack(tmp_path):
    rng = np.random.default_rng(1)
    base = periodic_texture(rng, (1, 48, 56))[0]
    path = tmp_path / "loop.tif"
    with tifffile.TiffWriter(path) as w:  # (an acquisition loop: a write a frame)
        for t in range(5):
            w.write((np.roll(base, (t, -2 * t), axis=(0, 1)) * 6e4).astype(np.uint16))
    with tifffile.TiffFile(path) as tif:
        assert len(tif.series) == 5  # (what tifffile makes of it: a series a frame)
    with open_stack(path) as src:
        assert (src.n_frames, src.frame_shape) == (5, (48, 56))
        assert any("5 image series of one 48x56 page each" in n for n in src.notes)
        np.testing.assert_array_equal(src.read(1, 4), tifffile.imread(path, key=[1, 2, 3]))
    res = align(path, device="cpu", max_shift=10)
    np.testing.assert_allclose(res.shifts, [[-t, 2 * t] for t in range(5)], atol=0.02)


def test_a_frame_at_a_time_with_a_page_of_another_shape_is_told(tmp_path):
    """An odd page after the frames (a thumbnail, an appended crop): the frames before it, with a
    note (the file was read as its first series: one frame); one among them: refused (reading
    on would align frames of two shapes, the first alone one frame)."""
    frames = (np.random.default_rng(2).random((6, 24, 28)) * 4000).astype(np.uint16)
    for where in ("end", "middle"):
        path = tmp_path / f"{where}.tif"
        for k, f in enumerate(frames):
            if where == "middle" and k == 3:
                tifffile.imwrite(path, f[:, :10], append=True)
            tifffile.imwrite(path, f, append=True)
        if where == "end":
            tifffile.imwrite(path, frames[0][:, :10], append=True)
            with open_stack(path) as src:
                assert (src.n_frames, src.frame_shape) == (6, (24, 28))
                np.testing.assert_array_equal(src.read(0, 6), frames)
                assert any("read as 6 frames; the 1 series after them, of another shape or kind, "
                           "left out" in n for n in src.notes)
        else:
            with pytest.raises(InputError, match=r"holds 7 image series of one page each, not "
                               r"of one shape \(6 of 24x28, 1 of 24x10\)"):
                open_stack(path)


def test_series_of_other_shapes_are_still_the_first_series_with_a_note(tmp_path):
    path = tmp_path / "mixed.tif"
    with tifffile.TiffWriter(path) as w:
        w.write(np.zeros((4, 16, 18), np.uint16), photometric="minisblack")
        w.write(np.zeros((8, 8), np.uint16))
    with open_stack(path) as src:
        assert src.n_frames == 4
        assert any("holds 2 image series; read only the first" in n for n in src.notes)


def test_info_describes_volumes_and_says_how_they_are_read(hyperstack):
    from xcorr_app.io import describe

    d = describe(hyperstack)
    assert (d["axes"], d["shape"], d["frames"]) == ("TZYX", (4, 6, 40, 44), 24)
    assert "holds 4 volumes of 6 Z planes: read plane by plane" in d["notes"][0]
    assert "xcorr align registers these volumes in 3-D" in d["notes"][-1]


def test_volumes_without_aligned_keep_a_users_aligned_tif(hyperstack, tmp_path):
    """``--no-aligned --force`` removes an earlier run's aligned.tif, never a user's file."""
    out = tmp_path / "o"
    out.mkdir()
    mine = out / "aligned.tif"
    mine.write_bytes(b"not a run's")
    res = xcorr("align", hyperstack, "--volumes", "--no-aligned", "--force", "--out", out,
                "--device", "cpu")
    assert_clean_error(res, "not the aligned stack of an earlier xcorr run")
    assert mine.read_bytes() == b"not a run's"
    first = xcorr("align", hyperstack, "--volumes", "--out", tmp_path / "run", "--device", "cpu",
                  "-q")
    assert first.returncode == 0, first.stderr
    again = xcorr("align", hyperstack, "--volumes", "--no-aligned", "--force", "--out",
                  tmp_path / "run", "--device", "cpu", "-q")
    assert again.returncode == 0, again.stderr
    assert not (tmp_path / "run" / "aligned.tif").exists()


@pytest.mark.parametrize("attrs, pixel, names, said", [
    ({"element_size_um": 0.3}, None, [], "element_size_um 0.3 holds no Y and X sizes"),
    ({"element_size_um": "1 0.5 0.25"}, (0.5, 0.25, "µm"), [], None),
    ({"element_size_um": np.array([2.0, 0.4, 0.4])}, (0.4, 0.4, "µm"), [], None),
    ({"channel_names": 3}, None, [], "channel_names 3 is not a list of names"),
    ({"channel_names": "GFP"}, None, ["GFP"], None),
])
def test_hdf5_attributes_of_other_shapes_are_notes_not_failures(tmp_path, attrs, pixel, names,
                                                                said):
    """(``element_size_um`` as a scalar or a text, ``channel_names`` as a number: an internal
    error before.)"""
    h5py = pytest.importorskip("h5py")
    from xcorr_app.io import describe

    path = tmp_path / "m.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("data", data=np.zeros((3, 16, 18), np.uint16))
        for k, v in attrs.items():
            ds.attrs[k] = v
    d = describe(path)
    assert d["frames"] == 3 and d["pixel_size"] == pixel and d["channel_names"] == names
    assert (said is None) == (not any("element_size_um" in n or "channel_names" in n
                                      for n in d["notes"]))
    if said:
        assert any(said in n for n in d["notes"]), d["notes"]


def test_its_planes_are_read_where_frames_are_not_registered(hyperstack, tmp_path):
    """Filtering or viewing a T x Z file plane by plane is fine (T then Z, with a note); only a
    run that registers frames refuses it (check_planes)."""
    from xcorr_app.io import check_planes

    with open_stack(hyperstack) as src:
        assert src.n_frames == 24 and isinstance(src.volumes, HoldsVolumes)
        assert any("read plane by plane, T then Z" in n for n in src.notes)
        with pytest.raises(HoldsVolumes):
            check_planes(src)
    res = xcorr("filter", hyperstack, "--kernel", "gaussian:1", "--out", tmp_path / "f.tif",
                "--device", "cpu", "-q")
    assert res.returncode == 0, res.stderr
    with open_stack(tmp_path / "f.tif") as out:  # (written back as the volumes they were)
        assert out.n_frames == 24 and (out.volumes.times, out.volumes.planes) == (
            src.volumes.times, src.volumes.planes)


def test_a_truncated_hyperstack_is_still_volumes(hyperstack, tmp_path):
    """(Its whole pages were read as frames of T alone: the declared Z was lost.)"""
    from xcorr_app.io import readable_frames

    cut = tmp_path / "cut.tif"
    data = hyperstack.read_bytes()
    cut.write_bytes(data[:len(data) - 3 * 40 * 44 * 2])
    with readable_frames(cut):
        with pytest.raises(HoldsVolumes, match="4 time points of 6 Z planes"):
            align(cut, device="cpu")


def test_a_folder_of_z_stacks_is_a_series_of_volumes(tmp_path):
    """A light-sheet export, one ZYX ImageJ hyperstack a time point: its planes were aligned
    as 2-D frames against plane 0 (exit 0), --volumes refused the folder, and info said TYX
    with no calibration. It is T x Z now: info says so with the first file's calibration,
    align registers it in 3-D, 2-D frames are refused as for a TZYX file."""
    from scipy import ndimage as ndi

    from xcorr_app.alignment import align_volumes
    from xcorr_app.io import describe

    rng = np.random.default_rng(6)
    big = ndi.gaussian_filter(rng.random((28, 72, 72)), 2) ** 3
    truth = np.array([(0.3 * t, 0.6 * t, -0.4 * t) for t in range(4)])
    folder = tmp_path / "export"
    folder.mkdir()
    for t, s in enumerate(truth):
        vol = ndi.shift(big, s, order=3)[6:22, 8:64, 8:64]
        tifffile.imwrite(folder / f"vol_t{t:03d}.tif",
                         (vol / big.max() * 4000 + 100).astype(np.uint16), imagej=True,
                         resolution=(1 / 0.3, 1 / 0.3),
                         metadata={"axes": "ZYX", "spacing": 1.2, "unit": "um"})
    d = describe(folder)
    assert (d["axes"], d["shape"]) == ("TZYX", (4, 16, 56, 56))
    assert d["pixel_size"][:2] == pytest.approx((0.3, 0.3)) and d["z_step"] == pytest.approx(1.2)
    with pytest.raises(HoldsVolumes):
        align(folder, device="cpu")
    res = align_volumes(folder, device="cpu")
    np.testing.assert_allclose(res.shifts, -truth, atol=0.05)
    out = tmp_path / "o"
    r = xcorr("align", folder, "--out", out, "--device", "cpu", "-q")
    assert r.returncode == 0, r.stderr
    assert (out / "shifts.csv").read_text().startswith("t,dz,dy,dx")
    with tifffile.TiffFile(out / "aligned.tif") as tif:
        assert tif.series[0].axes == "TZYX" and tif.imagej_metadata["spacing"] == 1.2
    with pytest.raises(HoldsVolumes, match=r"pick one plane \(one file's plane, FILE\?z=K\)"):
        align(folder, device="cpu")
    # (a file of another plane count, one cut short: refused, not read as frames)
    tifffile.imwrite(folder / "vol_t999.tif", np.zeros((9, 56, 56), np.uint16), imagej=True,
                     metadata={"axes": "ZYX", "spacing": 1.2, "unit": "um"})
    with pytest.raises(InputError, match="holds Z stacks of 9, 16 planes"):
        describe(folder)
    # (a folder of 2-D frames, or of plain ImageJ stacks that name no Z, stays frames)
    plain = tmp_path / "plain"
    plain.mkdir()
    for t in range(3):
        tifffile.imwrite(plain / f"f{t}.tif", np.zeros((5, 16, 16), np.uint16), imagej=True)
    assert describe(plain)["axes"] == "TYX"


def test_a_multi_position_ome_tiff_names_its_series(tmp_path):
    """Two positions of one acquisition in one OME-TIFF (series of one frame size): read
    unnamed, the first was aligned with a note; now one `error:` line lists them, and
    ``FILE:1``, ``--dataset pos1`` read that series exactly, memory-mapped; a series that is
    not there lists the ones that are."""
    rng = np.random.default_rng(5)
    stacks = [(rng.random((n, 24, 30)) * 1000).astype(np.uint16) for n in (6, 4)]
    path = tmp_path / "multi.ome.tif"
    with tifffile.TiffWriter(path, ome=True) as w:
        for k, s in enumerate(stacks):
            w.write(s, metadata={"axes": "TYX", "Name": f"pos{k}", "PhysicalSizeX": 0.5 + k,
                                 "PhysicalSizeY": 0.5 + k})
    with pytest.raises(InputError, match=r"holds 2 image series of 24x30 frames \(0: pos0 .*; "
                                         r"1: pos1 .*\); name one: .*multi.ome.tif:1"):
        open_stack(path)
    for name in ("1", "pos1"):
        with open_stack(f"{path}:{name}") as src:
            assert src.memory_mapped
            np.testing.assert_array_equal(src.read(0, src.n_frames), stacks[1])
    with pytest.raises(InputError, match="has no image series 'pos7'; it holds 2"):
        open_stack(f"{path}:pos7")
    res = xcorr("info", path, "--dataset", "pos1")
    assert res.returncode == 0 and "4 x 24 x 30" in res.stdout
    # (the series' own shape and pixel size, not the first's)
    d = describe(f"{path}:1")
    assert d["shape"] == (4, 24, 30) and d["pixel_size"][:2] == (1.5, 1.5)
    # a damaged file: its whole pages are the first series' frames, another is refused
    data = path.read_bytes()
    cut = tmp_path / "cut.ome.tif"
    cut.write_bytes(data[:len(data) - 24 * 30 * 2 * 2])
    with readable_frames(cut), pytest.raises(InputError, match="image series 1 cannot be read"):
        open_stack(f"{cut}:1")
