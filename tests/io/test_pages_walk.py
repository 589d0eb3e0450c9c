"""The walk over a TIFF file's pages (io/_pages.py): the same counts and reasons as a plain
walk (one seek and read at a time, as it was first written) on whole and damaged files, many
strips a page included; one walk per file version; pages of one size checked without asking
tifffile for each page."""

import struct

import numpy as np
import pytest
import tifffile

from xcorr_app.errors import InputError
from xcorr_app.io import open_stack
from xcorr_app.io import _pages

_DATA_TAGS = ((273, 279), (324, 325))
_INT_FORMATS = {3: "H", 4: "I", 13: "I", 16: "Q", 18: "Q"}


def _values(fh, tiff, entry, size):
    _, dtype, count, value = entry
    fmt = _INT_FORMATS.get(dtype)
    if fmt is None:
        return ()
    nbytes = count * struct.calcsize(fmt)
    if nbytes <= tiff.offsetsize:
        raw = value[:nbytes]
    else:
        where = struct.unpack(tiff.offsetformat, value)[0]
        if where + nbytes > size:
            return None
        fh.seek(where)
        raw = fh.read(nbytes)
    return struct.unpack(f"{tiff.byteorder}{count}{fmt}", raw) if len(raw) == nbytes else None


def plain_walk(tif):
    """The reference: every page's entries and values read where they lie, one at a time."""
    fh, tiff = tif.filehandle, tif.tiff
    size = fh.size
    fh.seek(4 if tiff.version == 42 else 8)
    offset = struct.unpack(tiff.offsetformat, fh.read(tiff.offsetsize))[0]
    pages, seen = 0, set()
    while offset:
        if offset in seen:
            return pages, f"page {pages + 1} points back to an earlier page"
        if offset + tiff.tagnosize > size:
            return pages, f"the entries of page {pages + 1} lie beyond the end of the file"
        seen.add(offset)
        fh.seek(offset)
        n_tags = struct.unpack(tiff.tagnoformat, fh.read(tiff.tagnosize))[0]
        table = fh.read(n_tags * tiff.tagsize + tiff.offsetsize)
        if len(table) < n_tags * tiff.tagsize + tiff.offsetsize:
            return pages, f"the file ends inside the entries of page {pages + 1}"
        entries = {e[0]: e for e in struct.iter_unpack(tiff.tagheaderformat,
                                                       table[:-tiff.offsetsize])}
        end = 0
        for a, b in _DATA_TAGS:
            if a in entries and b in entries:
                starts, counts = (_values(fh, tiff, entries[a], size),
                                  _values(fh, tiff, entries[b], size))
                if starts is None or counts is None:
                    end = None
                    break
                if len(starts) == len(counts):
                    end = max(end, max((o + c for o, c in zip(starts, counts) if c), default=0))
        if end is None or end > size:
            return pages, f"the file ends inside the pixels of page {pages + 1}"
        pages += 1
        offset = struct.unpack(tiff.offsetformat, table[-tiff.offsetsize:])[0]
    return pages, None


def _by_page(path, frames, **kw):
    with tifffile.TiffWriter(path, bigtiff=kw.pop("bigtiff", False)) as tw:
        for f in frames:
            tw.write(f, contiguous=False, photometric="minisblack", **kw)
    return path


@pytest.fixture
def files(tmp_path, rng):
    data = rng.integers(0, 60000, (5, 64, 16), dtype=np.uint16)
    return {
        "one strip": _by_page(tmp_path / "a.tif", data),
        "many strips": _by_page(tmp_path / "b.tif", data, rowsperstrip=1),  # (64 a page)
        "bigtiff": _by_page(tmp_path / "c.tif", data, bigtiff=True, rowsperstrip=3),
        "contiguous": tifffile.imwrite(tmp_path / "d.tif", data, photometric="minisblack",
                                       rowsperstrip=2) or tmp_path / "d.tif",
        "tiles": tifffile.imwrite(tmp_path / "e.tif", np.zeros((3, 32, 48), np.uint16),
                                  photometric="minisblack", tile=(16, 16)) or tmp_path / "e.tif",
    }


def _walks(path):
    _pages._WALKED.clear()
    with tifffile.TiffFile(path) as tif:
        return _pages.whole_pages(tif), plain_walk(tif)


@pytest.mark.parametrize("layout", ["one strip", "many strips", "bigtiff", "contiguous", "tiles"])
def test_the_walk_counts_as_a_plain_walk_on_cut_files(files, layout, tmp_path):
    whole = files[layout].read_bytes()
    assert _walks(files[layout])[0][1] is None
    cut = tmp_path / "cut.tif"
    for end in sorted({*range(len(whole) - 300, len(whole), 7), *range(100, len(whole), 997)}):
        cut.write_bytes(whole[:end])
        try:
            found, expected = _walks(cut)
        except tifffile.TiffFileError:
            continue  # (tifffile refuses the file before any walk)
        assert found == expected, end


def test_a_cut_in_the_last_of_many_strips_is_found(files, tmp_path):
    whole = files["many strips"].read_bytes()
    cut = tmp_path / "cut.tif"
    cut.write_bytes(whole[:-1])  # the last strip of the last page loses a byte
    assert _walks(cut)[0] == (4, "the file ends inside the pixels of page 5")


def test_a_damaged_count_of_entries_is_said_not_read(files, tmp_path):
    """A BigTIFF page claiming 2**60 entries: the file ends inside them (no read that size)."""
    blob = bytearray(files["bigtiff"].read_bytes())
    with tifffile.TiffFile(files["bigtiff"]) as tif:
        third = tif.pages[2].offset
    blob[third:third + 8] = struct.pack("<Q", 2 ** 60)
    damaged = tmp_path / "damaged.tif"
    damaged.write_bytes(bytes(blob))
    _pages._WALKED.clear()
    with tifffile.TiffFile(damaged) as tif:
        assert _pages.whole_pages(tif) == (2, "the file ends inside the entries of page 3")


def test_the_walk_is_done_once_per_file_version(files, monkeypatch):
    import os

    path = files["one strip"]
    walks = []
    real = _pages._walk_chain
    monkeypatch.setattr(_pages, "_walk_chain", lambda fh, tiff: walks.append(1) or real(fh, tiff))
    _pages._WALKED.clear()
    for _ in range(3):
        with tifffile.TiffFile(path) as tif:
            assert _pages.whole_pages(tif) == (5, None)
    assert len(walks) == 1
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))  # a new version of the file
    with tifffile.TiffFile(path) as tif:
        _pages.whole_pages(tif)
    assert len(walks) == 2


def test_pages_of_one_size_are_checked_from_the_walk(tmp_path, rng, monkeypatch):
    """A compressed stack (read page by page): its pages' sizes come from the walk, not from
    each page's own entries read again."""
    path = tmp_path / "z.tif"
    tifffile.imwrite(path, rng.integers(0, 255, (40, 16, 16), dtype=np.uint8),
                     photometric="minisblack", compression="zlib")
    asked = []
    real = _pages.page_size
    monkeypatch.setattr(_pages, "page_size", lambda tif, offset: asked.append(offset)
                        or real(tif, offset))
    _pages._SIZED.clear()
    with open_stack(path) as src:
        assert src.n_frames == 40 and not src.memory_mapped
    assert len(asked) == 1  # the first page's


def test_pages_of_another_size_are_still_named(tmp_path, rng):
    path = _by_page(tmp_path / "odd.tif", [np.ones((16, 16), np.uint16)] * 3
                    + [np.ones((8, 16), np.uint16)], compression="zlib")
    _pages._SIZED.clear()
    with pytest.raises(InputError, match=r"page 3 \(counted from 0\) .* is 8x16 pixels"):
        with tifffile.TiffFile(path) as tif:
            _pages.check_page_sizes(tif, tif.pages[:4], path)
