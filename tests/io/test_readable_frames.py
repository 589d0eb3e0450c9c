"""A truncated TIFF file: an error naming the frame where it breaks, or under
``readable_frames`` its whole frames (the pixels as written) and a warning; a damaged page of a
whole file is named by its frame."""

import numpy as np
import pytest
import tifffile

from synthetic import write_cut_tiff, write_damaged_tiff
from xcorr_app.errors import InputError
from xcorr_app.io import open_stack, readable_frames
from xcorr_app.io._tiff import TruncatedError

LAYOUTS = ["plain", "imagej", "zlib", "imagej-zlib", "imagej-2ch"]


@pytest.mark.parametrize("cut", ["page1", 0.5, 0.9])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_readable_frames_are_the_frames_written(tmp_path, rng, layout, cut):
    data = rng.integers(0, 4000, size=(20, 24, 32), dtype=np.uint16)
    path = write_cut_tiff(tmp_path / "cut.tif", data, layout, cut)
    channel = 1 if layout == "imagej-2ch" else None
    expect = data.reshape(10, 2, 24, 32)[:, 1] if channel else data
    # (the way to read it named as Python has it: readable_frames=True is no option of align)
    with pytest.raises(TruncatedError, match=r"truncated or damaged after frame.*inside `with "
                       r"xcorr_app\.io\.readable_frames\(path\):`"):
        open_stack(path, channel=channel)
    with readable_frames(path), open_stack(path, channel=channel) as src:
        n = src.n_frames
        got = src.read(0, n)
        warnings = [w for w in src.notes if w.startswith("warning: ")]
    assert 1 <= n <= len(expect)
    if cut != "page1":
        assert n < len(expect)
    np.testing.assert_array_equal(got, expect[:n])
    assert len(warnings) == 1 and str(path) in warnings[0]
    assert (f"frames {n} to {len(expect) - 1} cannot be read" in warnings[0]
            if n < len(expect) else "no frame is lost" in warnings[0])
    # outside the block the file is refused again
    with pytest.raises(TruncatedError):
        open_stack(path, channel=channel)


def test_readable_frames_of_a_folder(tmp_path, rng):
    data = rng.integers(0, 4000, size=(20, 24, 32), dtype=np.uint16)
    folder = tmp_path / "frames"
    folder.mkdir()
    tifffile.imwrite(folder / "a_1.tif", data[:3], photometric="minisblack")
    write_cut_tiff(folder / "a_2.tif", data, "zlib", 0.5)
    with readable_frames(folder), open_stack(folder) as src:
        assert src.n_frames == 3 + 9
        np.testing.assert_array_equal(src.read(0, src.n_frames), np.r_[data[:3], data[:9]])


def test_a_damaged_page_is_named_by_its_frame(tmp_path, rng):
    data = rng.integers(0, 4000, size=(20, 24, 32), dtype=np.uint16)
    path = write_damaged_tiff(tmp_path / "damaged.tif", data, page=7)
    with open_stack(path) as src:
        np.testing.assert_array_equal(src.read(0, 7), data[:7])
        with pytest.raises(InputError, match=r"cannot read frame 7 \(counted from 0\) of 20 in "
                                             r".*damaged\.tif: its data are damaged"):
            src.read(4, 12)


@pytest.mark.parametrize("damaged", ["nothing readable", "half readable"])
def test_readable_frames_of_a_folder_stop_at_its_damaged_file(tmp_path, rng, damaged):
    """A folder of single frames with one file cut short: the frames before it (it was an
    error telling to pass readable_frames, which was passed); the files after it left out."""
    data = rng.integers(0, 4000, size=(8, 24, 32), dtype=np.uint16)
    folder = tmp_path / "frames"
    folder.mkdir()
    for k in range(8):
        tifffile.imwrite(folder / f"f_{k}.tif", data[k], photometric="minisblack")
    if damaged == "nothing readable":
        raw = (folder / "f_5.tif").read_bytes()
        (folder / "f_5.tif").write_bytes(raw[:len(raw) // 2])
        kept = 5
    else:
        write_cut_tiff(folder / "f_5.tif", rng.integers(0, 4000, (20, 24, 32), np.uint16),
                       "zlib", 0.5)
        kept = None
    with pytest.raises(TruncatedError):
        open_stack(folder)
    with readable_frames(folder), open_stack(folder) as src:
        n = src.n_frames
        warnings = [w for w in src.notes if w.startswith("warning: ")]
        got = src.read(0, n)
    if kept is not None:
        assert n == kept
    else:
        assert 5 < n < 5 + 20
    np.testing.assert_array_equal(got[:5], data[:5])
    assert any("f_5.tif is truncated" in w and "left out" in w for w in warnings), warnings


def test_a_folders_damaged_file_of_another_shape_is_still_refused(tmp_path, rng):
    """Under readable_frames the shape and pixel type checks came after the stop at the cut
    file: a cut file of other frames was kept and reading failed in NumPy."""
    folder = tmp_path / "frames"
    folder.mkdir()
    for k in range(3):
        tifffile.imwrite(folder / f"f_{k}.tif", rng.integers(0, 4000, (24, 32), np.uint16))
    write_cut_tiff(folder / "f_3.tif", rng.random((20, 40, 50)).astype(np.float32), "zlib", 0.5)
    tifffile.imwrite(folder / "f_4.tif", rng.integers(0, 4000, (24, 32), np.uint16))
    with readable_frames(folder), pytest.raises(InputError, match="same frame shape"):
        open_stack(folder)


def test_a_file_broken_before_its_first_frame_suggests_no_readable_frames(tmp_path):
    """A TIFF header and nothing whole after it: the error does not suggest the readable
    frames (there are none: --readable-frames gave the same error)."""
    path = tmp_path / "garbage.tif"
    path.write_bytes(b"II*\x00" + np.random.default_rng(1).bytes(2000))
    with pytest.raises(InputError) as info:
        open_stack(path)
    assert "truncated or damaged after frame 0" in str(info.value)
    assert "copy it again from the source" in str(info.value)
    assert "readable" not in str(info.value)
