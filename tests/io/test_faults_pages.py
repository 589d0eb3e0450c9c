"""A TIFF whose pages differ in size (io/_pages.py ``check_page_sizes``): tifffile reads every
page of a series with the first page's size, so a smaller page was read with the bytes after
it; such a file is refused with one line naming the page and its shape, on the API and the
command line."""

import numpy as np
import pytest
import tifffile
from PIL import Image

from cli_helpers import assert_clean_error, xcorr
from xcorr_app.errors import InputError
from xcorr_app.io import open_stack


def pillow_stack(path, pages):
    """A multi-page TIFF written by Pillow (each page its own strip, its entries between)."""
    images = [Image.fromarray(p) for p in pages]
    images[0].save(path, save_all=True, append_images=images[1:])
    return path


def pages_of(rng, n=10, shape=(64, 64), odd=None):
    pages = [(rng.random(shape) * 60000).astype(np.uint16) for _ in range(n)]
    if odd is not None:
        pages[6] = odd
    return pages


def test_a_smaller_page_is_refused_with_its_number_and_shape(tmp_path, rng):
    path = pillow_stack(tmp_path / "mixed.tif", pages_of(rng, odd=np.ones((48, 64), np.uint16)))
    with pytest.raises(InputError, match=r"page 6 .* 48x64 pixels, but its first page is 64x64"):
        open_stack(path)


def test_a_page_of_other_pixels_is_refused(tmp_path, rng):
    path = pillow_stack(tmp_path / "bits.tif", pages_of(rng, odd=np.ones((64, 64), np.uint8)))
    with pytest.raises(InputError, match=r"page 6 .* of 8 bits.*of 16 bits"):
        open_stack(path)


def test_pages_of_one_size_still_read(tmp_path, rng):
    pages = pages_of(rng)
    with open_stack(pillow_stack(tmp_path / "plain.tif", pages)) as src:
        assert src.n_frames == 10 and not src.memory_mapped
        np.testing.assert_array_equal(src.read(0, 10), np.array(pages))


def test_a_second_series_of_another_shape_is_still_a_note(tmp_path, rng):
    path = tmp_path / "two.tif"
    with tifffile.TiffWriter(path) as tw:
        tw.write(np.ones((3, 16, 16), np.uint16), compression="zlib", photometric="minisblack")
        tw.write(np.ones((2, 8, 8), np.uint16), compression="zlib", photometric="minisblack")
    with open_stack(path) as src:
        assert (src.n_frames, src.frame_shape) == (3, (16, 16))
        assert any("2 image series" in n for n in src.notes)


def test_cli_refuses_the_file_with_one_line(tmp_path, rng):
    path = pillow_stack(tmp_path / "mixed.tif", pages_of(rng, odd=np.ones((48, 64), np.uint16)))
    res = xcorr("align", path, "--out", tmp_path / "o", "--device", "cpu")
    assert_clean_error(res, "page 6", "48x64")
    assert not (tmp_path / "o").exists()
